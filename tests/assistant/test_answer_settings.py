"""A QA answer is served only under the settings it was generated with (plugins/answer_binding)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from tests.assistant.test_assistant import BEN, GEN, OLD, Q, _pc, fresh_answer

CHANGES: list[dict[str, Any]] = [
    {"top_k": 1},
    {"chunk_separator": "\n--\n"},
    {"reuse": "shifted"},
    {"relevance_threshold": 0.99},
]


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: next(iter(c)))
def test_a_setting_of_the_prompt_changed_answers_like_a_fresh_store(tmp_path: Path,
                                                                    change: dict[str, Any]) -> None:
    pc = _pc(tmp_path / "old")
    pc.add_documents([OLD, BEN], scope="alice")
    assert pc.ask(Q, scope="alice", **GEN).source == "generated"
    assert pc.ask(Q, scope="alice", **GEN).source == "qa_bank"
    pc.configure(**change)
    after = pc.ask(Q, scope="alice", **GEN)
    pc.configure(**{k: getattr(percache.Config(), k) for k in change})
    assert pc.ask(Q, scope="alice", **GEN).source == "qa_bank"  # the first answer, served again
    pc.close()
    expected = fresh_answer(tmp_path / "fresh", [OLD, BEN], **change)
    assert after.source == expected.source != "qa_bank"
    assert (after.text, after.sources) == (expected.text, expected.sources)


def test_a_handle_with_other_settings_on_the_store_is_not_served_the_answer(tmp_path: Path) -> None:
    three, one = _pc(tmp_path / "s"), _pc(tmp_path / "s")
    one.configure(top_k=1)
    three.add_documents([OLD, BEN], scope="alice")
    assert three.ask(Q, scope="alice", **GEN).source == "generated"
    answer = one.ask(Q, scope="alice", **GEN)
    assert answer.source == "generated" and len(answer.sources) == 1
    three.close()
    one.close()


def test_a_sampled_answer_is_not_served_to_a_greedy_question(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "old")
    pc.add_documents([OLD, BEN], scope="alice")
    torch.manual_seed(0)
    sampled = pc.ask(Q, scope="alice", do_sample=True, top_k=0, temperature=5.0, **GEN)
    after = pc.ask(Q, scope="alice", **GEN)
    pc.close()
    expected = fresh_answer(tmp_path / "fresh", [OLD, BEN])
    assert sampled.text != expected.text  # serving the sample would answer otherwise
    assert after.source == expected.source == "generated" and after.text == expected.text
    assert sampled.source == "generated" and sampled.not_stored.startswith("sampled")


def test_a_document_added_by_a_handle_with_other_settings_makes_the_answer_stale(tmp_path: Path) -> None:
    # the new chunk is not in the adding handle's top-1, but it is in the answer's top-3
    dan = {"text": "Dan: parking is free on weekends.", "id": "dan"}
    three, one = _pc(tmp_path / "s"), _pc(tmp_path / "s")
    one.configure(top_k=1)
    three.add_documents([OLD, BEN], scope="alice")
    assert three.ask(Q, scope="alice", **GEN).source == "generated"
    one.add_documents([dan], scope="alice")
    after = three.ask(Q, scope="alice", **GEN)
    three.close()
    one.close()
    expected = fresh_answer(tmp_path / "fresh", [OLD, BEN, dan])
    assert after.source == expected.source == "generated" and len(expected.sources) == 3
    assert (after.text, after.sources) == (expected.text, expected.sources)
