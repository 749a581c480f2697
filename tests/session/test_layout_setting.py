"""configure(chat_template=...) between turns: sessions render what a handle opened with the new
setting renders (turns already in a conversation keep their ids, as when it is resumed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import percache_plugin as percache
from tests.helpers import baseline, tiny_pair

FIRST, SECOND = "Hello there.", "And the second message?"


def _two_turns(pair: Any, store: Path, reopen: bool) -> tuple[Any, list[int]]:
    """Turn 1 with the template; turn 2 with chat_template=False, set by configure() or by a
    handle opened with it on the same store. The second reply and a new session's prompt."""
    model, tok = pair
    pc = percache.enable(model, tok, store=store, predict="off")
    pc.sessions.create("s", system="Be brief.")
    pc.sessions.create("empty", system="Be brief.")
    pc.chat(FIRST, session="s", max_new_tokens=3)
    if reopen:
        pc.close()
        pc = percache.enable(model, tok, store=store, predict="off", chat_template=False)
    else:
        pc.configure(chat_template=False)
    second = pc.chat(SECOND, session="s", max_new_tokens=3)
    with pc.disabled():
        assert second.token_ids == baseline(model, second.prompt_ids, 3)[0]
    if reopen:
        pc.sessions.create("empty", system="Be brief.")
    fresh = pc.chat(FIRST, session="empty", max_new_tokens=3)
    pc.close()
    return second, fresh.prompt_ids


def test_configured_chat_template_renders_like_a_handle_opened_with_it(tmp_path: Path) -> None:
    pair = tiny_pair("llama")
    tok = pair[1]
    want, want_fresh = _two_turns(pair, tmp_path / "reopened", reopen=True)
    got, got_fresh = _two_turns(pair, tmp_path / "configured", reopen=False)
    assert tok.decode(want.prompt_ids).endswith("User: " + SECOND + "\nAssistant:")
    assert got.prompt_ids == want.prompt_ids and got.token_ids == want.token_ids
    assert "<|im_start|>" not in tok.decode(want_fresh)
    assert got_fresh == want_fresh
