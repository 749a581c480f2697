"""A failed cache write never fails a request: full disk, read-only database (defect 4)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.kv import node_files
from tests.helpers import SEGMENTS, tiny_pair

DOCS = ["Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.",
        "Ben: the budget review is on Monday; travel costs are over plan."]
GEN = {"max_new_tokens": 4, "do_sample": False}


def _full_disk(pc: percache.PerCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every database connection of the handle refuses writes; node files cannot be written."""
    for db in (pc.store._index.db, pc.qa_bank._rows.db, pc.idle_queue._db, pc.prediction_state._db):
        db.execute("PRAGMA query_only = ON")

    def no_space(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(node_files, "write_node_temp", no_space)


def test_requests_answer_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path / "s", embedder="hash", answer_grounding=False,
                         predict="history", prediction_quiet_s=0.0)
    try:
        pc.add_documents(DOCS, scope="u")
        first = pc.generate(SEGMENTS, **GEN)
        asked = pc.ask("When is the choir rehearsal?", scope="u", **GEN)
        assert asked.source == "generated"
        _full_disk(pc, monkeypatch)
        cached = pc.generate(SEGMENTS, **GEN)  # fully cached: needs no write at all
        assert cached.text == first.text
        assert cached.stats.nodes_reused == len(pc.prompt(SEGMENTS).reusable) > 0
        # Its hit counters could not be written (unless served from the RAM tier): no error.
        hit = pc.ask("When is the choir rehearsal ?", scope="u", **GEN)
        assert hit.source == "qa_bank" and hit.text == asked.text
        new = pc.ask("What is over plan?", scope="u", **GEN)
        assert new.source == "generated" and new.stats is not None
        assert new.stats.store_errors >= 2  # its K/V and its QA entry
        changed = pc.generate([*SEGMENTS[:-1], "Who owns the slides?"], **GEN)
        assert changed.stats.nodes_reused == cached.stats.nodes_reused
        assert pc.stats().store_errors >= new.stats.store_errors
    finally:
        pc.close()
