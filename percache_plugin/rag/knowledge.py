"""The knowledge bank: documents -> chunks -> embeddings -> a persisted hybrid index."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .chunking import Chunk, Document, as_document, chunk_document
from .embeddings import Embedder
from .index import HybridIndex

__all__ = ["KnowledgeBank", "AddReport"]

_META = "knowledge.json"


@dataclass(frozen=True)
class AddReport:
    """What :meth:`KnowledgeBank.add_documents` did.

    :ivar documents: documents received.
    :ivar new_chunks: chunks that were not in the bank before (embedded and indexed now).
    :ivar duplicate_chunks: chunks already present (same text in the same scope), skipped.
    """

    documents: int
    new_chunks: tuple[Chunk, ...]
    duplicate_chunks: int


class KnowledgeBank:
    """Chunks of the user's documents, searchable by BM25 + embeddings.

    :param directory: where the index lives (``None``: in memory). Reopening loads the stored
        embeddings; nothing is embedded again.
    :param embedder: the embedder; a reopened bank refuses a different one (its vectors would
        not be comparable), naming both.
    :param chunk_words: target chunk size in words.
    """

    def __init__(self, directory: Path | None, embedder: Embedder, *, chunk_words: int = 100) -> None:
        self.directory = directory
        self.embedder = embedder
        self.chunk_words = chunk_words
        self._lock = threading.RLock()
        self.index = self._open()

    def _open(self) -> HybridIndex:
        if self.directory is None or not (self.directory / _META).is_file():
            return HybridIndex(self.embedder.dim)
        meta = json.loads((self.directory / _META).read_text())
        if meta.get("embedder") != self.embedder.name:
            raise ValueError(
                f"knowledge bank at {self.directory} was built with embedder {meta.get('embedder')!r}, "
                f"not {self.embedder.name!r}; use the same embedder or a new store"
            )
        return HybridIndex.load(self.directory / "index")

    def _save(self) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.index.save(self.directory / "index")
        tmp = self.directory / f".{_META}.tmp"
        tmp.write_text(json.dumps({"embedder": self.embedder.name, "dim": self.embedder.dim}))
        os.replace(tmp, self.directory / _META)

    def add_documents(
        self, docs: Iterable[str | bytes | Mapping[str, object] | Document], *, scope: str | None = None
    ) -> AddReport:
        """Chunk, embed and index documents. ``scope`` applies to documents that carry none.

        Every document is validated before anything is indexed, so a bad one (empty, not UTF-8)
        raises naming it and leaves the bank unchanged."""
        if isinstance(docs, (str, bytes, Document)) or isinstance(docs, Mapping):
            docs = [docs]  # type: ignore[list-item]
        documents = []
        for i, obj in enumerate(docs):
            try:
                doc = as_document(obj)  # type: ignore[arg-type]
            except (ValueError, TypeError) as exc:
                raise type(exc)(f"document {i}: {exc}") from None
            if scope is not None and doc.scope is None:
                doc = Document(doc.text, doc.id, scope, doc.metadata)
            documents.append(doc)
        with self._lock:
            chunks: dict[str, Chunk] = {}
            for doc in documents:
                for c in chunk_document(doc, target_words=self.chunk_words):
                    chunks.setdefault(c.id, c)
            new = [c for c in chunks.values() if c.id not in self.index]
            if new:
                vectors = self.embedder.embed([c.text for c in new]).astype(np.float32)
                self.index.add(new, vectors)
                self._save()
            return AddReport(len(documents), tuple(new), len(chunks) - len(new))

    def retrieve(self, query: str, k: int = 3, *, scope: str | None = None,
                 query_embedding: np.ndarray | None = None) -> list[Chunk]:
        """The ``k`` best chunks for ``query`` within ``scope`` (``None``: all scopes)."""
        with self._lock:
            if len(self.index) == 0:
                return []
            emb = query_embedding if query_embedding is not None else self.embedder.embed([query])[0]
            return [self.index.chunk(h.chunk_id) for h in self.index.search(query, emb, k, scope=scope)]

    def chunk(self, chunk_id: str) -> Chunk:
        return self.index.chunk(chunk_id)

    def chunks(self) -> list[Chunk]:
        """Every chunk in the bank, in the order added."""
        with self._lock:
            return self.index.chunks()

    def remove_chunks(self, chunk_ids: Iterable[str]) -> int:
        """Remove chunks (unknown ids are ignored) and persist the index; returns how many."""
        with self._lock:
            removed = self.index.remove(list(chunk_ids))
            if removed:
                self._save()
            return removed

    def __len__(self) -> int:
        return len(self.index)
