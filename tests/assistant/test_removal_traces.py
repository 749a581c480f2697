"""Delete means delete: once a document is removed (or replaced by another text), no file of the
store holds its text or its embedding, while the handle is still open."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import percache_plugin as percache
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
