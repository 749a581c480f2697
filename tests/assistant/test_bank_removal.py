"""The knowledge bank's own removal methods delete the answers and K/V built on what they remove."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.hooks.specs import hookimpl
from tests.assistant.test_assistant import BEN, GEN, OLD, Q, _pc, fresh_answer

REMOVALS: dict[str, Callable[[percache.PerCache], object]] = {
    "remove_document": lambda pc: pc.knowledge.remove_document("ana", "alice"),
    "remove_chunks": lambda pc: pc.knowledge.remove_chunks(
        [c.id for c in pc.knowledge.chunks() if c.doc_id == "ana"]),
}


def _ana_chunk(pc: percache.PerCache) -> str:
    return next(c.id for c in pc.knowledge.chunks() if c.doc_id == "ana")


@pytest.mark.parametrize("removal", list(REMOVALS))
def test_a_removed_document_answers_like_a_fresh_store_without_it(tmp_path: Path, removal: str) -> None:
    pc = _pc(tmp_path / "old")
    pc.add_documents([OLD, BEN], scope="alice")
    gone = _ana_chunk(pc)
    first = pc.ask(Q, scope="alice", **GEN)
    assert first.source == "generated" and gone in first.sources
    assert any(n.extra.get("chunk") == gone for n in pc.engine.store.nodes())
    REMOVALS[removal](pc)
    assert not any(gone in e.sources for e in pc.qa_bank.entries())
    assert not any(n.extra.get("chunk") == gone for n in pc.engine.store.nodes())
    after = pc.ask(Q, scope="alice", **GEN)
    pc.close()
    expected = fresh_answer(tmp_path / "fresh", [BEN])
    assert after.source == expected.source == "generated" and gone not in after.sources
    assert (after.text, after.sources) == (expected.text, expected.sources)


class _Failing:
    @hookimpl(tryfirst=True)
    def percache_sources_forgotten(self, ctx: object, ids: Sequence[str]) -> int:
        raise OSError("disk full")


@pytest.mark.parametrize("removal", list(REMOVALS))
def test_answers_go_before_the_chunks(tmp_path: Path, removal: str) -> None:
    # deleting the answers failed: the chunks stay (never an answer without its source)
    pc = _pc(tmp_path / "s")
    pc.add_documents([OLD, BEN], scope="alice")
    gone = _ana_chunk(pc)
    assert pc.ask(Q, scope="alice", **GEN).source == "generated"
    pc.plugins.register(_Failing())
    with pytest.raises(OSError, match="disk full"):
        REMOVALS[removal](pc)
    assert gone in pc.knowledge.chunk_ids()
    assert any(gone in e.sources for e in pc.qa_bank.entries())
    pc.close()
