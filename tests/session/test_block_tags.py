"""The prefix blocks a session publishes are tagged with it in the session database, so deleting
the session (``pc.sessions.delete``, ``percache store remove --session``) and forgetting a fact
recalled into it find them without reading its turn rows: a corrupt row, an evicted turn or a
restart loses nothing of what must go."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.cli import main
from percache_plugin.kv.blocks import stored_prefix
from tests.helpers import tiny_pair

BLOCK = 16
ASKS = ("What does Ana drink?", "And her desk?", "Anything else?")
FACTS = ["Ana drinks Quillberry tea every morning", "Ana keeps a Quillberry plant on her desk"]
MEMORY: dict[str, Any] = dict(embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0)


def _corrupt(root: Path, turn_id: int) -> None:
    con = sqlite3.connect(root / "sessions.sqlite")
    with con:
        con.execute("UPDATE chat_turns SET reply_ids = '[61, 82' WHERE name = 's' AND turn_id = ?", (turn_id,))
    con.close()


def _held(pc: percache.PerCache, conversations: list[list[int]], start: int = 0) -> list[str]:
    """The stored nodes holding one of ``conversations`` past position ``start``."""
    return sorted({k for ids in conversations for k in stored_prefix(pc.store, ids, start)})


@pytest.mark.parametrize("how", ["delete", "corrupt row", "evicted", "admin", "in memory"])
def test_a_deleted_session_leaves_none_of_its_prefix_blocks(tmp_path: Path, how: str) -> None:
    model, tok = tiny_pair("llama")
    budget = {"session_kv_tokens": 64} if how == "evicted" else {}
    store = None if how == "in memory" else tmp_path  # in memory: the K/V store of the handle's process
    pc = percache.enable(model, tok, store=store, prefix_block_tokens=BLOCK, **budget)
    pc.sessions.create("s", system="You keep the Zorblax records.")
    pc.sessions.create("t", system="Another conversation entirely.")
    seen = []  # every conversation state "s" published blocks of (an eviction changes its ids)
    for ask in ASKS:
        pc.chat(ask, session="s", max_new_tokens=4)
        seen.append(pc.sessions.get("s").ids)
    other = pc.chat("Hello there, how are you?", session="t", max_new_tokens=4).prompt_ids
    if how == "evicted":
        assert pc.sessions.get("s").evicted_turns > 0
    assert _held(pc, seen) and _held(pc, [other])
    if how in ("corrupt row", "admin"):
        pc.close()
        if how == "corrupt row":
            _corrupt(tmp_path, 1)
        else:
            assert main(["store", "remove", str(tmp_path), "--session", "s"]) == 0
        pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=BLOCK)
    try:
        if how != "admin":
            pc.sessions.delete("s")
        assert _held(pc, seen) == []
        assert _held(pc, [other])  # another session's blocks stay
    finally:
        pc.close()


def test_a_session_shares_its_blocks_with_a_fork_until_both_are_deleted(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=BLOCK)
    try:
        pc.sessions.create("s", system="You keep the Zorblax records.")
        for ask in ASKS[:2]:
            pc.chat(ask, session="s", max_new_tokens=4)
        pc.sessions.fork("s", "f")
        pc.chat(ASKS[2], session="f", max_new_tokens=4)
        shared = pc.sessions.get("s").ids
        assert _held(pc, [shared])
        pc.sessions.delete("s")
        assert _held(pc, [shared])  # the fork's conversation holds them too
        pc.sessions.delete("f")
        assert _held(pc, [shared]) == []
    finally:
        pc.close()


@pytest.mark.parametrize("where", ["handle", "admin"])
def test_forget_drops_the_blocks_of_a_turn_whose_row_is_unreadable(tmp_path: Path, where: str) -> None:
    """Turn 1 alone recalled the fact as text; its row is corrupt, so forget cannot read the
    conversation's ids from its rows: the blocks holding the fact are found by their tags."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=BLOCK, **MEMORY)
    ids = [pc.memory.add(f, scope="ana").fact.id for f in FACTS]
    pc.sessions.create("s", system="Be brief.")
    for i, ask in enumerate(ASKS):  # only the first turn recalls facts
        pc.chat(ask, session="s", memory_scope="ana" if i == 0 else None, max_new_tokens=3)
    session = pc.sessions.get("s")
    conversation, start = session.ids, len(session.head_ids)
    assert session.turns[0].fact_ids and not session.turns[1].fact_ids and _held(pc, [conversation], start)
    pc.close()
    _corrupt(tmp_path, 1)
    if where == "admin":
        assert main(["memory", "forget", str(tmp_path), ids[0]]) == 0
    pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=BLOCK, **MEMORY)
    try:
        if where == "handle":
            pc.memory.forget(ids[0])
        assert _held(pc, [conversation], start) == []
    finally:
        pc.close()


def test_a_deleted_session_leaves_none_of_the_blocks_it_published_under_a_personas_weights(tmp_path: Path) -> None:
    from tests.personas.loras import llama_with_loras

    model, tok, dirs, _ = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok, store=tmp_path / "store", prefix_block_tokens=BLOCK)
    try:
        pc.personas.add("pa", "You keep the Zorblax records.", adapter=dirs["a"])
        pc.sessions.create("s")
        replies = [pc.chat(ask, session="s", persona="pa", max_new_tokens=4) for ask in ASKS]
        fp = pc.sessions.get("s").fingerprint  # the adapter's weights
        assert fp != pc.fingerprint
        store = pc.engine.stores.get(fp, pc.config)
        conversation = replies[-1].prompt_ids
        assert stored_prefix(store, conversation)
        pc.sessions.delete("s")
        assert stored_prefix(store, conversation) == []
    finally:
        pc.close()
