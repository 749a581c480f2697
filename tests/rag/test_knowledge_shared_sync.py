"""Two knowledge banks on one directory (two processes, or two handles): chunks the other bank
deletes while this one reads the new ones are gone, not an error. The interleaving is driven by
a wrapper around the row reader, not by timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.knowledge import KnowledgeBank


def test_chunks_removed_while_the_new_rows_are_read_are_gone(tmp_path: Path) -> None:
    embedder = HashEmbedder(32)
    a, b = KnowledgeBank(tmp_path, embedder), KnowledgeBank(tmp_path, embedder)
    a.add_documents([{"text": "The choir sings on Friday.", "id": "keep"}], scope="s")
    b.add_documents([{"text": "The ferry leaves at noon.", "id": "gone"}], scope="s")
    fetch = a._rows.fetch

    def removed_meanwhile(ids: Any) -> Any:  # b removes the document a is about to read
        a._rows.fetch = fetch  # type: ignore[method-assign]
        b.remove_document("gone", "s")
        return fetch(ids)

    a._rows.fetch = removed_meanwhile  # type: ignore[method-assign]
    assert [c.doc_id for c in a.chunks()] == ["keep"]
    assert [c.doc_id for c in a.retrieve("When does the ferry leave?", 3, scope="s")] == ["keep"]
    a.close()
    b.close()


def test_a_bank_opening_while_another_saves_reads_one_whole_snapshot(tmp_path: Path,
                                                                     monkeypatch: Any) -> None:
    # A bank opening read the manifest, then another process's save switched it and deleted the
    # files it named: hnswlib raised "Cannot open file" out of the opening (add_documents of a
    # new handle failed). Opening now reads under the snapshot lock that saving holds.
    import threading

    import percache_plugin.rag.index as index_module

    embedder = HashEmbedder(32)
    writer = KnowledgeBank(tmp_path, embedder, snapshot_every=1)
    writer.add_documents([{"text": "The choir sings on Friday.", "id": "a"}], scope="s")
    read = index_module.read_snapshot

    def saved_meanwhile(directory: Path) -> Any:
        monkeypatch.setattr(index_module, "read_snapshot", read)
        snapshot = read(directory)  # the manifest and files of this save, verified
        save = threading.Thread(target=writer.add_documents,
                                args=([{"text": "The ferry leaves at noon.", "id": "b"}],), kwargs={"scope": "s"})
        save.start()
        save.join(timeout=2)  # a save that waits for the lock is let go after this read
        return snapshot

    monkeypatch.setattr(index_module, "read_snapshot", saved_meanwhile)
    reader = KnowledgeBank(tmp_path, embedder)
    assert sorted(c.doc_id for c in reader.chunks()) == ["a", "b"]
    assert reader.repairs["index_corrupt"] == 0
    reader.close()
    writer.close()
