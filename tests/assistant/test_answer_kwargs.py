"""A request whose generation settings change greedy tokens neither reads nor writes the QA
bank (assistant/exact_kwargs.py); settings that leave them still hit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LogitsProcessor

import percache_plugin as percache
from tests.assistant.test_answer_length import DOCS, _pc
from tests.assistant.test_assistant import Q

CAP = 12
CHANGING: list[dict[str, Any]] = [
    {"repetition_penalty": 1.5},
    {"no_repeat_ngram_size": 1},
    {"exponential_decay_length_penalty": (2, 2.0)},  # ends the answer sooner
]


def _fresh(store: Path, **gen: Any) -> percache.Answer:
    """What a fresh store answers to Q with ``gen``."""
    fresh = _pc(store)
    fresh.add_documents(DOCS, scope="alice")
    answer = fresh.ask(Q, scope="alice", max_new_tokens=CAP, **gen)
    fresh.close()
    assert answer.source == "generated"
    return answer


class _Watch(LogitsProcessor):
    """Counts decoding steps; leaves the scores as they are."""

    observes_only = True

    def __init__(self) -> None:
        self.steps = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.steps += 1
        return scores


class _Ban(LogitsProcessor):
    """Bans one token: other greedy tokens (it does not say it observes only)."""

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores[:, self.token] = -float("inf")
        return scores


@pytest.mark.parametrize("change", CHANGING, ids=lambda c: next(iter(c)))
def test_an_answer_generated_with_a_changing_setting_is_not_served_to_a_plain_ask(
        tmp_path: Path, change: dict[str, Any]) -> None:
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    changed = pc.ask(Q, scope="alice", max_new_tokens=CAP, **change)
    plain = pc.ask(Q, scope="alice", max_new_tokens=CAP)
    pc.close()
    expected = _fresh(tmp_path / "fresh")
    assert changed.text != expected.text  # serving it would answer otherwise
    assert plain.source == "generated" and plain.text == expected.text
    assert changed.source == "generated" and next(iter(change)) in changed.not_stored


@pytest.mark.parametrize("change", CHANGING, ids=lambda c: next(iter(c)))
def test_a_request_with_a_changing_setting_is_not_served_the_plain_answer(
        tmp_path: Path, change: dict[str, Any]) -> None:
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    plain = pc.ask(Q, scope="alice", max_new_tokens=CAP)
    assert pc.ask(Q, scope="alice", max_new_tokens=CAP).source == "qa_bank"
    changed = pc.ask(Q, scope="alice", max_new_tokens=CAP, **change)
    pc.close()
    expected = _fresh(tmp_path / "fresh", **change)
    assert plain.text != expected.text
    assert changed.source == expected.source == "generated" and changed.text == expected.text


def test_a_scores_editing_logits_processor_neither_reads_nor_writes(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    plain = pc.ask(Q, scope="alice", max_new_tokens=CAP)
    (entry,) = pc.qa_bank.entries()
    assert entry.tokens
    banned = pc.ask(Q, scope="alice", max_new_tokens=CAP, logits_processor=[_Ban(entry.tokens[0])])
    pc.close()
    assert banned.source == "generated" and banned.text != plain.text
    assert "logits_processor" in banned.not_stored


def test_settings_that_leave_greedy_tokens_still_hit(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    first = pc.ask(Q, scope="alice", max_new_tokens=CAP, temperature=0.5, streamer=None)
    watch = _Watch()
    hit = pc.ask(Q, scope="alice", max_new_tokens=CAP, logits_processor=[watch], top_p=0.5)
    pc.close()
    assert first.source == "generated" and first.not_stored == ""
    assert hit.source == "qa_bank" and watch.steps == 0
    expected = _fresh(tmp_path / "fresh", logits_processor=[_Watch()], top_p=0.5)
    assert hit.text == first.text == expected.text


def test_an_answer_is_bound_to_the_models_own_generation_settings(tmp_path: Path) -> None:
    # generate applies model.generation_config to every answer: a repetition_penalty set there
    # changes the greedy tokens as the keyword argument does, so the plain answer is stale
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    plain = pc.ask(Q, scope="alice", max_new_tokens=CAP)
    assert pc.ask(Q, scope="alice", max_new_tokens=CAP).source == "qa_bank"
    pc.engine.model.generation_config.repetition_penalty = 1.5
    changed = pc.ask(Q, scope="alice", max_new_tokens=CAP)
    again = pc.ask(Q, scope="alice", max_new_tokens=CAP)
    pc.engine.model.generation_config.repetition_penalty = 1.0
    back = pc.ask(Q, scope="alice", max_new_tokens=CAP)
    pc.close()
    expected = _fresh(tmp_path / "fresh", repetition_penalty=1.5)
    assert plain.text != expected.text
    assert changed.source == "generated" and changed.text == expected.text
    assert again.source == "qa_bank" and again.text == expected.text
    assert back.text == plain.text  # served or generated again: the plain answer either way


class _StopAfter:
    """A caller's stopping criterion that ends the answer after ``n`` new tokens."""

    def __init__(self, n: int) -> None:
        self.n, self.start = n, -1

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        if self.start < 0:
            self.start = input_ids.shape[1] - 1
        done = input_ids.shape[1] - self.start >= self.n
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool)  # type: ignore[return-value]


def test_a_request_whose_stopping_criterion_ends_the_answer_is_not_served_the_whole_one(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    plain = pc.ask(Q, scope="alice", max_new_tokens=CAP)
    cut = pc.ask(Q, scope="alice", max_new_tokens=CAP, stopping_criteria=[_StopAfter(2)])
    pc.close()
    expected = _fresh(tmp_path / "fresh", stopping_criteria=[_StopAfter(2)])
    assert cut.text != plain.text
    assert cut.source == "generated" and cut.text == expected.text


def test_criteria_that_never_end_an_answer_are_served_and_stop_strings_are_not() -> None:
    from percache_plugin.assistant.exact_kwargs import inexact_kwargs

    class Watch:
        observes_only = True

    assert inexact_kwargs({"stopping_criteria": [Watch()]}, serving=True) == ""
    assert "stopping_criteria" in inexact_kwargs({"stopping_criteria": [_StopAfter(2)]}, serving=True)
    assert inexact_kwargs({"stopping_criteria": [_StopAfter(2)]}) == ""  # its uncut answer may be stored
    assert "stop_strings" in inexact_kwargs({"stop_strings": ["."]}, serving=True)
    assert inexact_kwargs({"stop_strings": ["."]}) == ""
