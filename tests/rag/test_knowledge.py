"""The knowledge bank: the database is the source of truth; damaged index snapshots are
detected and rebuilt (defect 5); scopes never mix (defect 7); files are owner-only (defect 8);
two banks on one directory see each other's documents (defect 3)."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.knowledge import KnowledgeBank
from tests.rag.test_rag_index import FACTS, add_removed_slot, holds_vector

EMB = HashEmbedder(128)


def _bank(directory: Path | None, **kwargs: object) -> KnowledgeBank:
    return KnowledgeBank(directory, EMB, **kwargs)  # type: ignore[arg-type]


def _texts(bank: KnowledgeBank, query: str, scope: str | None = None, k: int = 3) -> list[str]:
    return [c.text for c in bank.retrieve(query, k, scope=scope)]


def _saved_bank(tmp_path: Path) -> Path:
    bank = _bank(tmp_path / "kb", snapshot_every=1)
    bank.add_documents(FACTS)
    bank.close()
    assert (tmp_path / "kb" / "index" / "manifest.json").is_file()
    return tmp_path / "kb"


def _snapshot_file(directory: Path, kind: str) -> Path:
    manifest = json.loads((directory / "index" / "manifest.json").read_text())
    return directory / "index" / manifest["files"][kind]["name"]


@pytest.mark.parametrize("kind", ["manifest", "chunks", "embeddings", "hnsw"])
def test_damaged_snapshot_is_rebuilt_from_the_database(
        tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    directory = _saved_bank(tmp_path)
    path = directory / "index" / "manifest.json" if kind == "manifest" else _snapshot_file(directory, kind)
    data = bytearray(path.read_bytes())
    data[:8] = b"\xde\xad\xbe\xef" * 2  # 8 changed bytes at the start
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="percache"):
        bank = _bank(directory)
    assert bank.repairs["index_corrupt"] == 1
    assert any(path.name in r.message for r in caplog.records), [r.message for r in caplog.records]
    assert len(bank) == len(FACTS)
    assert _texts(bank, "choir rehearsal", k=1) == [FACTS[0]]
    bank.close()


def test_lost_vectors_are_re_embedded(tmp_path: Path) -> None:
    directory = _saved_bank(tmp_path)
    (directory / "index" / "manifest.json").unlink()
    db = sqlite3.connect(directory / "knowledge.sqlite3")
    db.execute("UPDATE kb_chunks SET vector = x'00' WHERE rowid % 2 = 0")
    db.execute("UPDATE kb_chunks SET metadata = '{broken' WHERE rowid = 1")
    db.commit()
    db.close()
    bank = _bank(directory)
    assert bank.repairs["reembedded"] == len(FACTS) // 2
    assert bank.repairs["rows_repaired"] == 1
    assert _texts(bank, "winter tyres", k=1) == [FACTS[5]]
    bank.close()
    assert _bank(directory).repairs["reembedded"] == 0  # the rows were repaired


def test_scope_none_means_unscoped_only(tmp_path: Path) -> None:
    bank = _bank(tmp_path / "kb")
    bank.add_documents(FACTS[:3], scope="alice")
    bank.add_documents(FACTS[3:5], scope="bob")
    assert _texts(bank, "choir rehearsal budget review") == []  # nothing unscoped yet
    bank.add_documents(["Shared: the office is closed on Friday."])
    assert _texts(bank, "choir rehearsal on Friday", k=5) == ["Shared: the office is closed on Friday."]
    assert set(_texts(bank, "choir rehearsal budget", "alice", k=5)) == set(FACTS[:3])
    assert set(_texts(bank, "choir rehearsal budget", "bob", k=5)) == set(FACTS[3:5])


def test_two_banks_on_one_directory_keep_each_others_documents(tmp_path: Path) -> None:
    a, b = _bank(tmp_path / "kb", snapshot_every=1), _bank(tmp_path / "kb", snapshot_every=1)
    for i, fact in enumerate(FACTS):
        (a if i % 2 else b).add_documents([fact])
    assert sorted(c.text for c in a.chunks()) == sorted(FACTS) == sorted(c.text for c in b.chunks())
    assert _texts(a, "winter tyres", k=1) == [FACTS[5]] and _texts(b, "dentist", k=1) == [FACTS[1]]
    b.remove_chunks([c.id for c in b.chunks() if "tyres" in c.text])
    assert len(a) == len(FACTS) - 1
    a.close()
    b.close()
    assert sorted(c.text for c in _bank(tmp_path / "kb").chunks()) == sorted(FACTS[:5])


def test_every_file_is_owner_only(tmp_path: Path) -> None:
    directory = _saved_bank(tmp_path)
    bank = _bank(directory)
    bank.add_documents(["One more note."])
    modes = {str(p.relative_to(directory)): p.stat().st_mode & 0o777 for p in directory.rglob("*")}
    assert all(m == (0o700 if (directory / p).is_dir() else 0o600) for p, m in modes.items()), modes
    assert "knowledge.sqlite3-wal" in modes
    bank.close()


def test_a_store_written_before_the_database_is_moved_into_it(tmp_path: Path) -> None:
    """Older stores kept chunks only in the index files (manifest without checksums)."""
    directory = tmp_path / "kb"
    index = directory / "index"
    index.mkdir(parents=True)
    records = [{"id": f"c{i}", "doc_id": f"d{i}", "index": 0, "text": t, "scope": None,
                "metadata": {}, "label": i} for i, t in enumerate(FACTS)]
    (index / "chunks.0123456789ab.json").write_text(json.dumps(records))
    with open(index / "embeddings.0123456789ab.npy", "wb") as f:
        np.save(f, EMB.embed(FACTS).astype(np.float32))
    (index / "manifest.json").write_text(json.dumps({
        "format": "percache-hybrid-index", "version": 1, "dim": 128, "fusion": "rrf", "rrf_k": 5,
        "weights": [0.5, 1.0], "count": 6, "next_label": 6,
        "files": {"chunks": "chunks.0123456789ab.json", "embeddings": "embeddings.0123456789ab.npy",
                  "hnsw": "hnsw.0123456789ab.bin"}}))
    (directory / "knowledge.json").write_text(json.dumps({"embedder": EMB.name, "dim": 128}))
    bank = _bank(directory)
    assert len(bank) == len(FACTS) and _texts(bank, "dentist", k=1) == [FACTS[1]]
    with pytest.raises(ValueError, match="built with embedder"):
        KnowledgeBank(directory, HashEmbedder(64))


def test_a_document_given_again_with_its_id_replaces_its_old_text(tmp_path: Path) -> None:
    bank = _bank(tmp_path / "kb")
    bank.add_documents([{"text": "The rehearsal is on Friday.", "id": "ana", "scope": "a"},
                        {"text": "The rehearsal is on Friday.", "id": "ana", "scope": "b"},
                        {"text": "The budget review is on Monday.", "id": "ben", "scope": "a"}])
    report = bank.add_documents([{"text": "The rehearsal is cancelled.", "id": "ana"}], scope="a")
    assert len(report.replaced_chunks) == 1 and len(report.new_chunks) == 1
    assert sorted(c.text for c in bank.chunks() if c.scope == "a") == [
        "The budget review is on Monday.", "The rehearsal is cancelled."]
    assert _texts(bank, "rehearsal", scope="b") == ["The rehearsal is on Friday."]  # other scope kept
    again = bank.add_documents([{"text": "The rehearsal is cancelled.", "id": "ana"}], scope="a")
    assert again.replaced_chunks == () and again.new_chunks == ()
    bank.close()
    reopened = _bank(tmp_path / "kb")  # the rows, not only the index, lost the old text
    assert "The rehearsal is on Friday." not in _texts(reopened, "rehearsal Friday", scope="a")


def test_a_document_re_chunked_at_another_size_keeps_no_old_chunk() -> None:
    text = " ".join(f"Sentence {i} says the meeting moved to room {i}." for i in range(12))
    bank = _bank(None, chunk_words=20)
    old = bank.add_documents([{"text": text, "id": "notes"}])
    bank.chunk_words = 60
    new = bank.add_documents([{"text": text, "id": "notes"}])
    assert {c.id for c in bank.chunks()} == {c.id for c in new.new_chunks}
    assert set(new.replaced_chunks) == {c.id for c in old.new_chunks}


def test_a_paragraph_another_document_holds_stays_when_one_drops_it(tmp_path: Path) -> None:
    bank = _bank(tmp_path / "kb", chunk_words=5)
    shared = "Quarterly figures are due on the tenth."
    bank.add_documents([{"text": f"Ana's note. {shared}", "id": "ana"},
                        {"text": f"Ben's note. {shared}", "id": "ben"}])
    assert len([c for c in bank.chunks() if c.text == shared]) == 1  # stored once
    report = bank.add_documents([{"text": "Ana's note, rewritten without it.", "id": "ana"}])
    assert shared in [c.text for c in bank.chunks()]  # Ben's document still has it
    assert len(report.replaced_chunks) == 1  # Ana's own first sentence, not the shared one
    bank.add_documents([{"text": "Ben's note, rewritten without it.", "id": "ben"}])
    assert shared not in [c.text for c in bank.chunks()]  # nobody holds it now
    bank.close()


def test_a_bank_closing_does_not_write_back_a_chunk_another_bank_removed(tmp_path: Path) -> None:
    first, second = _bank(tmp_path), _bank(tmp_path)
    first.add_documents([{"text": FACTS[0], "id": "choir"}, FACTS[1]])
    assert len(second) == 2
    second.add_documents([FACTS[2]])  # a change of its own to save on close
    first.remove_document("choir", None)
    first.close()
    second.close()  # its index still held the choir chunk: it saved it into the snapshot
    snapshot = b"".join(p.read_bytes() for p in (tmp_path / "index").iterdir())
    assert b"choir rehearsal" not in snapshot and b"Dentist" in snapshot
    second.close()  # closing again does nothing


def test_a_bank_opening_a_snapshot_with_removed_vectors_saves_it_again_at_once(tmp_path: Path) -> None:
    directory = _saved_bank(tmp_path)
    vector = add_removed_slot(directory / "index", "The old locker code is 4417.")
    bank = _bank(directory)
    assert not any(holds_vector(p.read_bytes(), vector) for p in (directory / "index").iterdir())
    assert len(bank) == len(FACTS)
    bank.close()
