"""bench chat's methods on a tiny model: the counts they report are the ones they must be."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from percache_plugin.bench.chat import (
    METHODS,
    conversation,
    locomo_messages,
    sampled_turns,
    shared_copy,
)
from percache_plugin.bench.chat_summary import summary
from tests.helpers import tiny_pair

MESSAGES = [f"Message {i} about the trip." for i in range(8)]


def _args(budget: int) -> argparse.Namespace:
    return argparse.Namespace(budget=budget, max_new=4, every=3)


def test_methods_agree_on_what_they_compute(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    rows = conversation(model, tok, MESSAGES, list(METHODS), _args(10_000), tmp_path)
    re, carried, exact = rows["reprefill"], rows["carried"], rows["exact"]
    assert [r.computed for r in re] == [r.prompt_tokens for r in re]
    assert [r.prompt_tokens for r in exact] == [r.prompt_tokens for r in re] == [r.prompt_tokens for r in carried]
    assert [r.computed for r in exact] == [r.computed for r in carried]
    assert all(r.computed < r.prompt_tokens for r in carried[1:])
    measured = {r.turn for r in re if r.ttft_s is not None}
    assert measured == sampled_turns(8, 3) == {1, 3, 6, 8}
    (restart,) = rows["restart"]  # turn 5, resumed from the snapshot with nothing recomputed
    assert restart.turn == 5 and restart.note == "snapshot" and restart.recomputed == 0
    assert restart.computed == exact[4].computed and restart.prompt_tokens == exact[4].prompt_tokens
    assert all(r.kv_bytes > 0 for r in exact + carried + rows["window"])
    lines = summary(rows, 10_000, 5)["targets"]
    assert any("restart" in line for line in lines) and any("reprefill/exact" in line for line in lines)


def test_a_small_budget_bounds_percache_and_slides_the_window(tmp_path: Path) -> None:
    model, tok = tiny_pair("qwen2")
    rows = conversation(model, tok, MESSAGES, ["carried", "window", "exact", "masked"], _args(120), tmp_path)
    assert max(r.prompt_tokens for r in rows["window"]) < rows["carried"][-1].prompt_tokens
    assert sum(r.evicted for r in rows["exact"]) > 0 and sum(r.evicted for r in rows["masked"]) > 0
    assert rows["exact"][-1].kv_bytes < rows["carried"][-1].kv_bytes
    assert any(r.kl is not None for r in rows["masked"])


def test_shared_copy_shares_weights_not_modules() -> None:
    model, _ = tiny_pair("llama")
    other = shared_copy(model)
    assert other is not model and next(other.modules()) is not next(model.modules())
    assert all(a is b for a, b in zip(model.parameters(), other.parameters(), strict=True))


def test_locomo_messages(tmp_path: Path) -> None:
    data = [{"conversation": {"session_1": [{"text": "one two three"}, {"text": "four"}],
                              "session_2": [{"text": "five six"}]}}]
    path = tmp_path / "l.json"
    path.write_text(json.dumps(data))
    assert locomo_messages(path, 0, 3, 2) == ["one two", "four", "five six"]
    with pytest.raises(ValueError, match="only 3 dialogue turns"):
        locomo_messages(path, 0, 4, 2)
    with pytest.raises(FileNotFoundError, match="--data"):
        locomo_messages(tmp_path / "nope.json", 0, 1, 2)
