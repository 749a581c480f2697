"""The knowledge bank's own removal methods delete the answers and K/V built on what they remove."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

import percache_plugin as percache
from percache_plugin.hooks.specs import hookimpl
from percache_plugin.kv.store import KVStore, stored_fingerprints
from tests.assistant.test_assistant import BEN, GEN, NEW, OLD, Q, _pc, fresh_answer

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


def _chunk_nodes_by_fingerprint(store: Path, chunk_id: str) -> dict[str, int]:
    counts = {}
    for fp in stored_fingerprints(store):
        with KVStore(store, fingerprint=fp) as kv:
            counts[fp] = sum(n.extra.get("chunk") == chunk_id for n in kv.nodes())
    return counts


@pytest.mark.parametrize("removal", [*REMOVALS, "replace"])
def test_a_removal_deletes_the_chunks_kv_of_every_model(tmp_path: Path, removal: str) -> None:
    # K/V of the chunk computed under other weights (an adapter, an older model) goes too, as
    # 'percache store remove --doc' does; so does that of a chunk a document given again drops
    pc = _pc(tmp_path)
    pc.add_documents([OLD, BEN], scope="alice")
    gone = _ana_chunk(pc)
    assert pc.ask(Q, scope="alice", **GEN).source == "generated"
    with torch.no_grad():
        next(pc.model.parameters()).add_(0.01)
    assert pc.ask(Q, scope="alice", **GEN).source == "generated"  # under the new weights' fingerprint
    if removal == "replace":
        pc.add_documents([NEW], scope="alice")
    else:
        REMOVALS[removal](pc)
    pc.close()
    left = _chunk_nodes_by_fingerprint(tmp_path, gone)
    assert len(left) == 2 and set(left.values()) == {0}


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "disk"])
def test_a_document_given_again_to_the_bank_itself_leaves_no_answer_or_kv_of_its_old_text(
        tmp_path: Path, on_disk: bool) -> None:
    # pc.knowledge.add_documents replaces the old chunks like pc.add_documents
    pc = _pc(tmp_path / "s" if on_disk else None)  # type: ignore[arg-type]
    pc.add_documents([OLD, BEN], scope="alice")
    gone = _ana_chunk(pc)
    assert gone in pc.ask(Q, scope="alice", **GEN).sources
    assert pc.knowledge.add_documents([NEW], scope="alice").replaced_chunks == (gone,)
    assert not any(gone in e.sources for e in pc.qa_bank.entries())
    assert not any(n.extra.get("chunk") == gone for n in pc.engine.store.nodes())
    after = pc.ask(Q, scope="alice", **GEN)
    assert gone not in after.sources
    pc.close()
