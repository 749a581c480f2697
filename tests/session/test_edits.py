"""percache_edit_cache: a plugin edits a session's live cache; the conversation follows."""

from __future__ import annotations

from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.session.evict import turn_spans
from tests.helpers import tiny_pair


class EvictFirstTurnOnce:
    def __init__(self) -> None:
        self.done = False

    @percache.hookimpl
    def percache_edit_cache(self, ctx: Any, session: Any, editor: Any) -> None:
        if self.done or len(session.turns) < 2:
            return
        start, end = turn_spans(session)[session.turns[0].turn_id]
        editor.evict(start, end)
        self.done = True


class DeleteHead:
    @percache.hookimpl
    def percache_edit_cache(self, ctx: Any, session: Any, editor: Any) -> None:
        if session.turns:
            editor.delete([0])


def test_a_plugin_evicting_a_turn_keeps_ids_and_slots_in_step() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, plugins=[EvictFirstTurnOnce()])
    pc.sessions.create("s", system="Be brief.")
    pc.chat("First message.", session="s", max_new_tokens=3)
    pc.chat("Second message.", session="s", max_new_tokens=3)
    reply = pc.chat("Third message.", session="s", max_new_tokens=3)
    session = pc.sessions.get("s")
    assert [t.turn_id for t in session.turns] == [2, 3]
    assert reply.stats.cache_edits == 2 and reply.stats.approximate
    assert reply.prompt_ids == session.head_ids + session.turns[0].ids + session.turns[1].user_ids
    assert session.cache.get_seq_length() in (session.n_tokens, session.n_tokens - 1)
    later = pc.chat("Fourth.", session="s", max_new_tokens=3)
    # no edit in this turn, but it still attends to the K/V the edit shifted
    assert later.stats.cache_edits == 0 and later.stats.approximate


def test_the_persistent_head_cannot_be_deleted() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, plugins=[DeleteHead()])
    pc.sessions.create("s", system="Be brief.")
    pc.chat("Hello.", session="s", max_new_tokens=3)
    with pytest.raises(ValueError, match="persistent head"):
        pc.chat("Again.", session="s", max_new_tokens=3)
    assert len(pc.sessions.get("s").turns) == 1


def test_deleted_user_ids_leave_the_turns_ids_without_its_memory_block() -> None:
    from percache_plugin.session.state import Turn

    # user ids: glue 1 2, memory block 7 8 9, message 3 4, prompt 5
    turn = Turn(1, "m", [1, 2, 7, 8, 9, 3, 4, 5], bare_ids=[1, 2, 3, 4, 5], fact_ids=["f"])
    turn.drop_user({1, 3, 6})  # a glue id, a memory id, a message id
    assert turn.user_ids == [1, 7, 9, 3, 5]
    assert turn.bare_ids == [1, 3, 5]
    plain = Turn(2, "m", [1, 2, 3])
    plain.drop_user({0})
    assert plain.user_ids == [2, 3] and plain.bare_ids is None
