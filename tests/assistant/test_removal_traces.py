"""Delete means delete: once a document is removed (or replaced by another text), no file of the
store holds its text or its embedding, while the handle is still open."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import percache_plugin as percache
from percache_plugin.admin import StoreAdmin
from percache_plugin.assistant.idle_tasks import BUILTIN_TASKS
from percache_plugin.buffer.plugin import RamTierKV
from percache_plugin.idle import IdleReport, IdleTask
from percache_plugin.stats import Generation, GenerationStats
from tests.assistant.test_assistant import BEN, GEN, _pc
from tests.rag.test_rag_index import holds_vector

SECRET = {"text": "Zorblax: the quartz locker opens with code 4417, every second Tuesday.", "id": "zz"}
OTHER = {"text": "Nothing is stored in the locker any more.", "id": "zz"}
Q = "When does the locker open?"
NEEDLES = [b"zorblax", b"4417"]

REMOVALS: dict[str, Callable[[percache.PerCache], object]] = {
    "remove_document": lambda pc: pc.knowledge.remove_document("zz", "me"),
    "remove_chunks": lambda pc: pc.knowledge.remove_chunks(
        [c.id for c in pc.knowledge.chunks() if c.doc_id == "zz"]),
    "replace": lambda pc: pc.add_documents([OTHER], scope="me"),
}


def files_holding(root: Path, needles: list[bytes], vector: np.ndarray | None = None) -> list[str]:
    """The files under ``root`` holding one of ``needles`` (any case) or ``vector``."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {n!r}" for n in needles if n in data.lower()]
            if vector is not None and holds_vector(data, vector):
                found.append(f"{path.relative_to(root)}: the embedding")
    return found


@pytest.mark.parametrize("removal", list(REMOVALS))
def test_a_removed_document_leaves_no_text_or_embedding_in_the_store(tmp_path: Path, removal: str) -> None:
    pc = _pc(tmp_path)
    pc.add_documents([SECRET, BEN], scope="me")
    assert pc.ask(Q, scope="me", **GEN).source == "generated"
    # an answer quoting the document (the tiny model's own answer is noise)
    pc.correct(pc.qa_bank.entries(scope="me")[0].id, "Every second Tuesday, with code 4417.")
    pc.close()  # a snapshot of the index, written on close, holds the chunk too
    pc = _pc(tmp_path)
    gone = next(c.id for c in pc.knowledge.chunks() if c.doc_id == "zz")
    vector = pc.knowledge.index.vectors([gone])[0]
    before = files_holding(tmp_path, NEEDLES, vector)
    assert any("knowledge/index" in f for f in before) and any("embedding" in f for f in before), before
    assert any(f.startswith("percache.sqlite3") for f in before), before
    REMOVALS[removal](pc)
    assert files_holding(tmp_path, NEEDLES, vector) == []  # the handle still open
    assert pc.ask(Q, scope="me", **GEN).source == "generated"
    pc.close()
    assert files_holding(tmp_path, NEEDLES, vector) == []


def _predicting(store: Path) -> percache.PerCache:
    pc = _pc(store)
    pc.configure(predict="knowledge", prediction_quiet_s=0.0)
    return pc


@pytest.mark.parametrize("removal", list(REMOVALS))
def test_the_abstract_built_from_a_removed_document_is_dropped_and_rebuilt(tmp_path: Path, removal: str) -> None:
    pc = _predicting(tmp_path / "s")
    pc.add_documents([SECRET, BEN], scope="me")
    pc.add_documents([{"text": "Carl: the projector is in room 4.", "id": "carl"}], scope="you")
    pc.idle()
    assert pc.prediction_state.abstract("me") and pc.prediction_state.abstract("you")
    you = pc.prediction_state.abstract("you")
    gone = {c.id for c in pc.knowledge.chunks() if c.doc_id == "zz"}
    REMOVALS[removal](pc)
    assert pc.prediction_state.abstract("me") == ""  # at once, not at the next idle time
    assert pc.prediction_state.abstract("you") == you  # another scope's stays
    queued = pc.idle_queue.pending()
    assert not any(cid in t.question for t in queued for cid in gone)  # no task names them
    assert any(t.kind == "abstract" and t.scope == "me" for t in queued)
    pc.idle()
    rebuilt = pc.prediction_state.abstract("me")
    pc.close()
    fresh = _predicting(tmp_path / "fresh")  # built from what is left, as a fresh store would
    fresh.add_documents([BEN] if removal != "replace" else [BEN, OTHER], scope="me")
    fresh.idle()
    assert rebuilt and rebuilt == fresh.prediction_state.abstract("me")
    fresh.close()


def test_store_remove_doc_leaves_no_text_embedding_or_abstract(tmp_path: Path) -> None:
    pc = _predicting(tmp_path)
    pc.add_documents([SECRET, BEN], scope="me")
    pc.idle()
    assert pc.ask(Q, scope="me", **GEN).source == "generated"
    pc.correct(pc.qa_bank.entries(scope="me")[0].id, "Every second Tuesday, with code 4417.")
    gone = next(c.id for c in pc.knowledge.chunks() if c.doc_id == "zz")
    vector = pc.knowledge.index.vectors([gone])[0]
    assert pc.prediction_state.abstract("me")
    pc.close()
    assert files_holding(tmp_path, NEEDLES, vector)
    with StoreAdmin(tmp_path) as admin:
        admin.remove_document("zz")
    assert files_holding(tmp_path, NEEDLES, vector) == []
    pc = _predicting(tmp_path)
    assert pc.prediction_state.abstract("me") == ""
    assert any(t.kind == "abstract" and t.scope == "me" for t in pc.idle_queue.pending())
    pc.idle()
    assert pc.prediction_state.abstract("me")  # built again from what is left
    pc.close()


def test_the_ram_tier_lets_go_of_a_removed_chunks_tensors(tmp_path: Path) -> None:
    pc = _pc(tmp_path)
    pc.add_documents([SECRET, BEN], scope="me")
    gone = next(c.id for c in pc.knowledge.chunks() if c.doc_id == "zz")
    pc.configure(use_qa_bank=False)
    for _ in range(3):  # the second reads the chunk's K/V; the third finds it read, in RAM
        assert pc.ask(Q, scope="me", **GEN).source == "generated"
    keys = [n.key for n in pc.store.nodes() if n.extra.get("chunk") == gone]
    tier = next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV)).tier
    assert tier is not None and any(tier.holds(k) for k in keys)
    REMOVALS["remove_document"](pc)
    assert not any(tier.holds(k) for k in keys)
    pc.close()


PREDICTED = "1. What opens the Zorblax locker?\n2. Which code does Zorblax use?\n"


def _predict_from(pc: percache.PerCache, chunk_id: str) -> None:
    """Run the knowledge prediction task about ``chunk_id`` with a model that writes
    :data:`PREDICTED` (the tiny random model writes no questions)."""
    ictx = copy.copy(pc.assistant.idle_context)
    ictx.generate = lambda *a, **kw: Generation(PREDICTED, [], [], GenerationStats())
    BUILTIN_TASKS["predict_knowledge"](ictx, IdleTask(0, "predict_knowledge", "chunk " + chunk_id, "me", 0.0),
                                       IdleReport())


@pytest.mark.parametrize("removal", list(REMOVALS))
def test_questions_predicted_from_a_removed_document_go_with_it(tmp_path: Path, removal: str) -> None:
    pc = _pc(tmp_path)
    pc.configure(similarity_threshold=0.95, population_cutoff=0.9)  # populate stores the question
    pc.add_documents([SECRET, BEN], scope="me")
    gone = next(c.id for c in pc.knowledge.chunks() if c.doc_id == "zz")
    _predict_from(pc, gone)
    assert pc.idle(max_tasks=1).by_kind == {"populate": 1}  # one stored, one still queued
    assert [e.origin for e in pc.qa_bank.entries(scope="me")] == ["predicted"]
    assert [t.kind for t in pc.idle_queue.pending()] == ["populate"]
    REMOVALS[removal](pc)
    assert files_holding(tmp_path, [b"zorblax"]) == []
    pc.idle()
    assert not [e for e in pc.qa_bank.entries() if "Zorblax" in e.question]
    pc.close()
    assert files_holding(tmp_path, [b"zorblax"]) == []


@pytest.mark.parametrize("removal", list(REMOVALS))
def test_no_file_keeps_the_key_or_token_hash_of_a_removed_chunks_kv(tmp_path: Path, removal: str) -> None:
    # both hash the chunk's token ids: they would confirm a guess of its text
    pc = _pc(tmp_path)
    pc.configure(use_qa_bank=False)  # no answer to delete (whose deletion checkpointed the file)
    pc.add_documents([SECRET, BEN], scope="me")
    gone = next(c.id for c in pc.knowledge.chunks() if c.doc_id == "zz")
    assert pc.ask(Q, scope="me", **GEN).source == "generated"
    nodes = [n for n in pc.store.nodes() if n.extra.get("chunk") == gone]
    needles = [v.encode() for n in nodes for v in (n.key, n.token_hash)]
    assert needles and files_holding(tmp_path, needles)
    REMOVALS[removal](pc)
    assert files_holding(tmp_path, needles) == []
    pc.close()
