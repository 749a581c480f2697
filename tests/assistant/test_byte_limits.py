"""The QA bank's and the K/V store's byte limits against what the user gave: a correction
outlives the answers around it, the limits hold on disk, and answers stay those of a fresh
handle with no cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from tests.helpers import tiny_pair

DOCS = [{"id": f"d{i}", "text": f"Note {i}: meeting number {i} is on day {i * 3} in room {i * 7}."}
        for i in range(8)]
QUESTIONS = [f"When is meeting number {i}?" for i in range(8)]
OPTS: dict[str, Any] = {"embedder": "hash", "answer_grounding": False, "predict": "off"}


def _handle(store: Path | None, **config: Any) -> percache.PerCache:
    torch.manual_seed(0)
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=store, **OPTS, **config)
    pc.add_documents(DOCS)
    return pc


def test_a_correction_outlives_the_answers_evicted_around_it(tmp_path: Path) -> None:
    pc = _handle(tmp_path, qa_byte_limit=4000)  # room for about three answers
    first = pc.ask(QUESTIONS[0], max_new_tokens=4)
    assert first.source == "generated"
    entry = pc.assistant.qa_bank.entries()[0]
    pc.correct(entry.id, "Day zero, room zero.")
    for q in QUESTIONS[1:]:  # never-served answers, each newer than the correction
        pc.ask(q, max_new_tokens=4)
    kept = pc.assistant.qa_bank.entries()
    assert len(kept) < len(QUESTIONS) and pc.assistant.qa_bank.stats()["evictions"] > 0
    assert sum(e.nbytes for e in kept) <= 4000
    again = pc.ask(QUESTIONS[0], max_new_tokens=4)
    assert (again.source, again.text) == ("qa_bank", "Day zero, room zero.")
    pc.disable()


def test_an_answer_larger_than_the_qa_byte_limit_says_it_was_not_stored(tmp_path: Path) -> None:
    fresh = _handle(None, use_qa_bank=False, use_kv=False)
    want = fresh.ask(QUESTIONS[1], max_new_tokens=4).text
    fresh.disable()
    pc = _handle(tmp_path, qa_byte_limit=100)  # smaller than any entry
    for _ in range(2):
        answer = pc.ask(QUESTIONS[1], max_new_tokens=4)
        assert (answer.source, answer.text) == ("generated", want)
        assert "storing it failed" in answer.not_stored
    assert pc.assistant.qa_bank.entries() == []
    pc.disable()


@pytest.mark.parametrize("kind", ["answer", "refresh", "populate", "decode"])
def test_idle_work_stores_no_answer_ask_would_not_give(tmp_path: Path, kind: str) -> None:
    question = "What colour is the bicycle?"  # nothing in the notes is about it
    fresh = _handle(None, use_qa_bank=False, use_kv=False, relevance_threshold=0.9)
    want = fresh.ask(question, max_new_tokens=4)
    fresh.disable()
    assert want.source == "no_documents"
    pc = _handle(tmp_path, relevance_threshold=0.9)
    pc.assistant.idle_queue.push(kind, question, None)
    pc.idle()
    assert [e for e in pc.assistant.qa_bank.entries() if e.answer is not None] == []
    got = pc.ask(question, max_new_tokens=4)
    assert (got.source, got.text) == (want.source, want.text)
    pc.disable()
