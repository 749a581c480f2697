"""bench chat's methods on a tiny model: the counts they report are the ones they must be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.bench.chat import locomo_messages
from percache_plugin.bench.chat_methods import percache_conversation, plain_conversation
from tests.helpers import tiny_pair

MESSAGES = [f"Message {i} about the trip." for i in range(8)]


def test_methods_agree_on_what_they_compute(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    re = plain_conversation(pc, MESSAGES, "reprefill", 10_000, 4, "Be brief.")
    carried = plain_conversation(pc, MESSAGES, "carried", 10_000, 4, "Be brief.")
    window = plain_conversation(pc, MESSAGES, "window", 120, 4, "Be brief.")
    pc.close()
    exact = percache_conversation(lambda: percache.enable(model, tok), MESSAGES, 4, "Be brief.")
    restart = percache_conversation(lambda: percache.enable(model, tok, store=tmp_path), MESSAGES, 4,
                                    "Be brief.", restart_at=5)
    assert [r.computed for r in re] == [r.prompt_tokens for r in re]
    assert [r.prompt_tokens for r in exact] == [r.prompt_tokens for r in re]
    assert [r.computed for r in exact] == [r.computed for r in carried] == [r.computed for r in restart]
    assert all(r.computed < r.prompt_tokens for r in carried[1:])
    assert max(r.prompt_tokens for r in window) < re[-1].prompt_tokens
    assert all(r.kv_bytes > 0 for r in exact + carried + window)


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
