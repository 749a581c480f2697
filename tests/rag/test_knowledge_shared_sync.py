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
