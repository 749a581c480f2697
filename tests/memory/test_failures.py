"""Memory fails soft: a failed memory write never fails the chat turn it follows (counted in
its stats), a corrupt fact row is a miss (counted, forgettable), not a crash, and a recalled
fact too long for the model's context is named in the error, never run past the context."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.memory.bank import UnknownFact
from percache_plugin.memory.idle import queue_turns
from percache_plugin.session.chat import MessageTooLong
from tests.helpers import tiny_pair


def test_a_failed_extraction_queue_write_keeps_the_reply_and_is_counted(tmp_path: Path) -> None:
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path, embedder="hash", predict="off",
                         memory_extraction="raw", prediction_quiet_s=0.0)
    try:
        pc.sessions.create("s")
        first = pc.chat("Ana drinks Quillberry tea.", session="s", max_new_tokens=2)
        assert first.stats.store_errors == 0
        pc.idle_queue._db.execute("PRAGMA query_only = ON")  # the queue's database refuses writes
        reply = pc.chat("Bob repairs old radios.", session="s", max_new_tokens=2)
        assert reply.stats.store_errors == 1 and reply.turn_id == 2
        assert pc.stats().store_errors >= 1
        assert [t.turn_id for t in pc.sessions.get("s").turns] == [1, 2]
    finally:
        pc.idle_queue._db.execute("PRAGMA query_only = OFF")
        pc.close()


CORRUPTIONS = {
    "vector": "UPDATE mem_facts SET vector = x'0102' WHERE id = ?",
    "metadata": "UPDATE mem_facts SET metadata = '{bad' WHERE id = ?",
    "metadata_type": "UPDATE mem_facts SET metadata = '[1, 2]' WHERE id = ?",
    "kv_keys": "UPDATE mem_facts SET kv_keys = 'nope' WHERE id = ?",
    "key_vector": "INSERT OR REPLACE INTO mem_keys VALUES (?, x'01')",
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_fact_row_is_a_miss_counted_and_forgettable(tmp_path: Path, corruption: str) -> None:
    model, tok = tiny_pair("llama")
    config: dict[str, Any] = dict(store=tmp_path, embedder="hash", predict="off", memory_recall=True,
                                  memory_threshold=0.0, answer_grounding=False, relevance_threshold=None)
    pc = percache.enable(model, tok, **config)
    bad = pc.memory.add("Ana drinks Quillberry tea every morning", scope="me").fact
    good = pc.memory.add("Ana keeps a Quillberry plant", scope="me").fact
    pc.memory.add("Bob repairs old radios", scope="me")
    pc.close()
    con = sqlite3.connect(tmp_path / "percache.sqlite3")
    with con:
        con.execute(CORRUPTIONS[corruption], (bad.id,))
    con.close()

    pc = percache.enable(model, tok, **config)
    try:
        pc.sessions.create("s")
        reply = pc.chat("Which Quillberry things does Ana have?", session="s", memory_scope="me", max_new_tokens=2)
        assert good.id in reply.stats.fact_ids and bad.id not in reply.stats.fact_ids
        assert bad.id not in [h.fact.id for h in pc.memory.search("Quillberry tea", scope="me")]
        assert bad.id not in pc.ask("Which tea does Ana drink?", scope="me", max_new_tokens=2).sources
        assert pc.memory.add("Cy plays jazz", scope="me").status == "added"
        assert pc.memory.corrupt == [bad.id]
        if "vector" in corruption:  # its row reads; it cannot be searched
            assert pc.memory.get(bad.id).text == bad.text
        else:
            with pytest.raises(UnknownFact, match="corrupt"):
                pc.memory.get(bad.id)
        pc.memory.forget(bad.id)
        assert pc.memory.corrupt == []
        with pytest.raises(UnknownFact, match="forgotten"):
            pc.memory.get(bad.id)
    finally:
        pc.close()


@pytest.mark.parametrize("mode", ["text", "splice", "splice-exact"])
def test_a_recalled_fact_too_long_for_the_context_is_named_not_run_past_it(mode: str) -> None:
    model, tok = tiny_pair("llama", max_position_embeddings=512)
    # memory_fact_tokens over the default (512 // 6): a fact the limit lets in still never runs past the context
    pc = percache.enable(model, tok, embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0,
                         memory_recall_mode=mode, memory_fact_tokens=1000)
    try:
        pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana")
        long = pc.memory.add("Ana notes: " + "Quillberry tea facts and more words " * 20, scope="ana").fact
        pc.memory.add("Bob repairs old radios", scope="ana")
        pc.sessions.create("s")
        with pytest.raises(MessageTooLong, match=r"memory (facts of|region of) 8[0-9][0-9] tokens.*pc.memory.update"):
            pc.chat("Which tea does Ana drink?", session="s", memory_scope="ana", max_new_tokens=2)
        pc.memory.forget(long.id)
        reply = pc.chat("Which tea does Ana drink?", session="s", memory_scope="ana", max_new_tokens=2)
        assert len(reply.prompt_ids) + 2 <= 512 and reply.stats.fact_ids
    finally:
        pc.close()


def test_bad_scopes_and_ids_are_named_and_a_bad_queued_task_does_not_block_idle() -> None:
    pc = percache.enable(*tiny_pair("llama"), embedder="hash", predict="off", memory_extraction="raw",
                         prediction_quiet_s=0.0)
    try:
        for scope in (5, b"me", ["me"]):
            with pytest.raises(TypeError, match="scope must be a str or None"):
                pc.chat("My vault combination is 8812 obsidian.", memory_scope=scope, max_new_tokens=2)
        assert pc.sessions.get("default").turns == [] and "memory_extract" not in pc.idle_queue.counts()
        for call in (pc.memory.get, pc.memory.forget, pc.memory.history):
            with pytest.raises(TypeError, match="a fact id must be a str, got list"):
                call(["m1"])
        with pytest.raises(TypeError, match="a fact id must be a str, got int"):
            pc.memory.update(5, "Ana drinks Quillberry tea")
        # a task queued with a scope that is not one (by an older version) is dropped and counted
        queue_turns(pc.idle_queue, "default", [(1, "User: my vault code is 8812 obsidian")], b"me")  # type: ignore[arg-type]
        pc.idle()
        assert pc.memory.extraction.bad_tasks == 1 and "memory_extract" not in pc.idle_queue.counts()
        assert pc.memory.scopes() == []
    finally:
        pc.close()


def test_a_failed_idle_extraction_write_is_counted_and_the_turn_kept_queued(tmp_path: Path) -> None:
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path, embedder="hash", predict="off",
                         memory_extraction="raw", prediction_quiet_s=0.0, draft_calibrate_idle=False)
    try:
        pc.chat("Ana drinks Quillberry tea.", memory_scope="me", max_new_tokens=2)
        rows = pc.memory.bank._rows.db
        rows.execute("PRAGMA query_only = ON")  # the memory's database refuses writes
        with pytest.raises(sqlite3.OperationalError):
            pc.idle()
        assert pc.stats().store_errors == 1 and pc.memory.extraction.write_errors == 1
        assert pc.memory.extraction.facts_added == 0
        assert [t.kind for t in pc.idle_queue.pending()] == ["memory_extract"]  # runs again
        rows.execute("PRAGMA query_only = OFF")
        pc.idle()
        (fact,) = pc.memory.list("me")
        assert fact.text.startswith("User: Ana drinks Quillberry tea.")
        assert pc.memory.extraction.facts_added == 1 and pc.stats().store_errors == 1
    finally:
        pc.memory.bank._rows.db.execute("PRAGMA query_only = OFF")
        pc.close()
