"""A saved session whose memory region row is unreadable: the region is a miss (the session
goes on without it, its K/V computed again from its turns, exactly), and forgetting a fact
still works and takes the unreadable region out."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from tests.helpers import baseline, tiny_pair

FACTS = ["Ana drinks Quillberry tea every morning", "Ana keeps a Quillberry plant on her desk"]
ASK = "What Quillberry things does Ana have?"


def _saved_session_with_a_corrupt_region(tmp_path: Path, facts: str) -> tuple[Any, Any, dict[str, Any], list[str]]:
    model, tok = tiny_pair("llama")
    config: dict[str, Any] = dict(store=tmp_path, embedder="hash", predict="off", memory_recall=True,
                                  memory_threshold=0.0, memory_recall_mode="splice")
    pc = percache.enable(model, tok, **config)
    ids = [pc.memory.add(f, scope="ana").fact.id for f in FACTS]
    pc.memory.add("Bob repairs old radios", scope="ana")
    pc.sessions.create("s", system="Be brief.")
    pc.chat(ASK, session="s", memory_scope="ana", max_new_tokens=3)
    assert pc.sessions.get("s").memory
    pc.close()
    con = sqlite3.connect(tmp_path / "sessions.sqlite")
    with con:
        assert con.execute("UPDATE chat_memory SET facts = ?", (facts,)).rowcount == 1
    con.close()
    return model, tok, config, ids


@pytest.mark.parametrize("facts", ["[[\"m1\", \"h\", [1, 2", "{}", "[[1]]"])
def test_a_session_with_an_unreadable_region_goes_on_without_it_exactly(tmp_path: Path, facts: str) -> None:
    model, tok, config, _ = _saved_session_with_a_corrupt_region(tmp_path, facts)
    pc = percache.enable(model, tok, **{**config, "memory_recall": False})
    try:
        assert [i.name for i in pc.sessions.list()] == ["default", "s"]
        session = pc.sessions.get("s")
        assert session.memory == [] and session.restored == "ids"
        reply = pc.chat("And what else?", session="s", max_new_tokens=3)
        assert "Relevant memories" not in tok.decode(reply.prompt_ids)
        with pc.disabled():
            assert reply.token_ids == baseline(pc.model, reply.prompt_ids, 3)[0]
    finally:
        pc.close()


def test_forget_takes_an_unreadable_region_out_of_a_saved_session(tmp_path: Path) -> None:
    model, tok, config, ids = _saved_session_with_a_corrupt_region(tmp_path, "[[\"x\", \"y\", [61, 82")
    pc = percache.enable(model, tok, **config)
    try:
        pc.memory.forget(ids[0])
        con = sqlite3.connect(tmp_path / "sessions.sqlite")
        rows = con.execute("SELECT header, facts FROM chat_memory").fetchall()
        con.close()
        assert [tuple(json.loads(c) for c in row) for row in rows] == [([], [])]
        reply = pc.chat(ASK, session="s", memory_scope="ana", max_new_tokens=3)
        assert FACTS[0] not in tok.decode(reply.prompt_ids) and FACTS[1] in tok.decode(reply.prompt_ids)
    finally:
        pc.close()
