"""A saved session whose turn rows are unreadable (a ``chat_turns`` column that is not the JSON
written): the session loads without its K/V snapshot, the turns it can still read are computed
again exactly, what it drops or repairs is listed, and forgetting a fact and listing sessions
go on (they raised from json before)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from tests.helpers import baseline, tiny_pair

FACTS = ["Ana drinks Quillberry tea every morning", "Ana keeps a Quillberry plant on her desk"]
FIELDS = ["user_ids", "reply_ids", "fact_ids", "bare_ids"]
BROKEN = "[61, 82"
CONFIG: dict[str, Any] = dict(embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0)


def _rows(tmp_path: Path, sql: str = "SELECT turn_id, user_ids, reply_ids, fact_ids, bare_ids FROM chat_turns "
                                     "WHERE name = 's' ORDER BY turn_id", args: tuple[Any, ...] = ()) -> list[Any]:
    con = sqlite3.connect(tmp_path / "sessions.sqlite")
    with con:
        rows = con.execute(sql, args).fetchall()
    con.close()
    return rows


def _saved_with_a_corrupt_turn(tmp_path: Path, column: str | None) -> tuple[Any, Any, list[str], list[Any]]:
    """Session 's' of three turns that recalled facts as text, turn 2's ``column`` corrupted;
    returns the model, tokenizer, fact ids and the rows as written."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, **CONFIG)
    ids = [pc.memory.add(f, scope="ana").fact.id for f in FACTS]
    pc.sessions.create("s", system="Be brief.")
    for ask in ("What does Ana drink?", "And her desk?", "Anything else?"):
        pc.chat(ask, session="s", memory_scope="ana", max_new_tokens=3)
    pc.close()
    rows = _rows(tmp_path)
    assert [r[0] for r in rows] == [1, 2, 3] and all(r[4] is not None for r in rows)  # facts recalled as text
    if column is not None:
        _rows(tmp_path, f"UPDATE chat_turns SET {column} = ? WHERE name = 's' AND turn_id = 2", (BROKEN,))
    return model, tok, ids, rows


@pytest.mark.parametrize("column", FIELDS)
def test_a_session_with_a_corrupt_turn_row_loads_and_goes_on_exactly(tmp_path: Path, column: str) -> None:
    model, tok, _, written = _saved_with_a_corrupt_turn(tmp_path, column)
    pc = percache.enable(model, tok, store=tmp_path, **{**CONFIG, "memory_recall": False})
    try:
        info = {i.name: i for i in pc.sessions.list()}["s"]
        assert info.unreadable_turns == (2,)
        session = pc.sessions.get("s")
        assert session.restored == "ids"
        if column == "fact_ids":  # kept without its memory block: the ids a forget would leave
            assert [t.turn_id for t in session.turns] == [1, 2, 3]
            assert session.turns[1].user_ids == json.loads(written[1][4]) and session.turns[1].fact_ids == []
        else:  # user/reply ids unreadable, or a memory block that could not be taken out
            assert [t.turn_id for t in session.turns] == [1, 3]
        reply = pc.chat("What else?", session="s", max_new_tokens=3)
        with pc.disabled():
            assert reply.token_ids == baseline(pc.model, reply.prompt_ids, 3)[0]
    finally:
        pc.close()
    rows = _rows(tmp_path)  # rewritten by the turn's save: every row readable again
    assert all(isinstance(json.loads(r[c]), list) for r in rows for c in (1, 2, 3))


@pytest.mark.parametrize("column", FIELDS)
def test_forget_cleans_a_corrupt_turn_row(tmp_path: Path, column: str) -> None:
    model, tok, ids, written = _saved_with_a_corrupt_turn(tmp_path, column)
    pc = percache.enable(model, tok, store=tmp_path, **CONFIG)
    try:
        pc.memory.forget(ids[0])
    finally:
        pc.close()
    rows = _rows(tmp_path)
    kept = [1, 2, 3] if column == "fact_ids" else [1, 3]  # a corrupt row that may hold the fact goes
    assert [r[0] for r in rows] == kept
    assert all(r[3] == "[]" and r[4] is None for r in rows)  # every memory block left (each held the fact)
    assert [json.loads(r[1]) for r in rows] == [json.loads(w[4]) for w in written if w[0] in kept]
    assert _rows(tmp_path, "SELECT COUNT(*) FROM chat_kv WHERE name = 's'") == [(0,)]


def test_sessions_list_counts_only_readable_turns_of_other_weights(tmp_path: Path) -> None:
    model, tok, _, _ = _saved_with_a_corrupt_turn(tmp_path, "reply_ids")
    for table in ("chat_sessions", "chat_turns", "chat_kv", "chat_memory", "chat_exact"):
        _rows(tmp_path, f"UPDATE {table} SET fingerprint = 'other weights'")
    pc = percache.enable(model, tok, store=tmp_path, **CONFIG)
    try:
        info = {i.name: i for i in pc.sessions.list()}["s"]
        assert info.fingerprint == "other weights" and info.turns == 2
    finally:
        pc.close()


@pytest.mark.parametrize("other_weights", [False, True])
def test_a_corrupt_kv_layout_is_a_miss(tmp_path: Path, other_weights: bool) -> None:
    """A ``chat_kv`` row whose layout is not the JSON written: the snapshot is not served (it
    raised from json on load and in pc.sessions.list())."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path)
    pc.sessions.create("s")
    pc.chat("Hello there.", session="s", max_new_tokens=3)
    pc.close()
    assert _rows(tmp_path, "UPDATE chat_kv SET layout = ? WHERE name = 's'", (BROKEN,)) == []
    if other_weights:
        for table in ("chat_sessions", "chat_turns", "chat_kv", "chat_memory", "chat_exact"):
            _rows(tmp_path, f"UPDATE {table} SET fingerprint = 'other weights'")
    pc = percache.enable(model, tok, store=tmp_path)
    try:
        info = {i.name: i for i in pc.sessions.list()}["s"]
        assert info.turns == 1 and info.kv_bytes == 0
        if not other_weights:
            assert pc.sessions.get("s").restored == "ids"
            reply = pc.chat("And then?", session="s", max_new_tokens=3)
            with pc.disabled():
                assert reply.token_ids == baseline(pc.model, reply.prompt_ids, 3)[0]
    finally:
        pc.close()


def test_a_corrupt_head_is_tokenized_again(tmp_path: Path) -> None:
    """A ``chat_sessions`` row whose head ids are not the JSON written: the session lists and
    loads, the next turn tokenizes the head from the system prompt and runs exactly, and a
    forget goes on (all raised from json)."""
    model, tok, ids, _ = _saved_with_a_corrupt_turn(tmp_path, None)
    (head,) = _rows(tmp_path, "SELECT head_ids FROM chat_sessions WHERE name = 's'")[0]
    _rows(tmp_path, "UPDATE chat_sessions SET head_ids = ? WHERE name = 's'", (BROKEN,))
    pc = percache.enable(model, tok, store=tmp_path, **CONFIG)
    try:
        assert {i.name: i for i in pc.sessions.list()}["s"].turns == 3
        assert pc.sessions.get("s").restored == "ids"
        pc.memory.forget(ids[0])
        reply = pc.chat("What else?", session="s", max_new_tokens=3)
        assert reply.prompt_ids[:len(json.loads(head))] == json.loads(head)
        with pc.disabled():
            assert reply.token_ids == baseline(pc.model, reply.prompt_ids, 3)[0]
    finally:
        pc.close()
    assert _rows(tmp_path, "SELECT head_ids FROM chat_sessions WHERE name = 's'") == [(head,)]
