"""Memory fails soft: a failed memory write never fails the chat turn it follows (counted in
its stats)."""

from __future__ import annotations

from pathlib import Path

import percache_plugin as percache
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
