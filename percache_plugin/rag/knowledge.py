"""The knowledge bank: documents -> chunks -> embeddings -> a hybrid index.

The chunk rows in SQLite (:mod:`.knowledge_db`, ``<directory>/knowledge.sqlite3``) are the
source of truth; the in-memory :class:`HybridIndex` is rebuilt from them when needed and
reconciled with them (by their generation counter) before every use, so documents added or
removed by another process or handle are seen at once and never overwritten. A snapshot of
the index (``<directory>/index``, written and read under a lock, verified on load) only saves
rebuilding it on open: when a snapshot file is damaged, the bank warns naming it, counts it and
rebuilds from the rows, re-embedding chunk texts whose stored vectors are unusable.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np

from ..filemodes import FILE_MODE, private_dir
from .add_report import AddReport
from .chunking import Chunk, Document, as_document, chunk_document
from .embeddings import Embedder, embed_with_progress
from .index import HybridIndex
from .index_files import CorruptIndexError, read_legacy
from .knowledge_db import ChunkRows
from .snapshot_lock import snapshot_lock

__all__ = ["KnowledgeBank", "AddReport"]

log = logging.getLogger("percache")

_META = "knowledge.json"
_DB = "knowledge.sqlite3"


class KnowledgeBank:
    """Chunks of the user's documents, searchable by BM25 + embeddings; thread-safe, and
    shareable by several processes and handles.

    :param directory: where the bank lives (``None``: in memory). Reopening embeds nothing
        again (vectors are stored with the chunks).
    :param embedder: the embedder; a reopened bank refuses a different one (its vectors would
        not be comparable), naming both.
    :param chunk_words: target chunk size in words.
    :param snapshot_every: save an index snapshot after this many unsaved chunk changes (and
        on :meth:`close`); 1 saves after every change.
    :ivar before_remove: called with the chunk ids :meth:`remove_document` or :meth:`remove_chunks`
        is about to delete, or :meth:`add_documents` to drop from a document given again, first
        (a handle's bank deletes the answers and K/V built on them, so a crash midway leaves
        less cache, never an answer without its source).
    :ivar guard: entered around :meth:`add_documents`, :meth:`remove_document` and
        :meth:`remove_chunks`, before the bank's own lock (a handle's bank: preempts its idle
        work and holds its engine, so no idle task stores what it computed from the chunks
        after they are forgotten).
    :ivar after_remove: called with what a removal did (``replaced_chunks``: the chunks deleted;
        ``scopes``: theirs), once they are gone (a handle's bank marks stale the answers whose
        questions retrieve other chunks since).
    """

    def __init__(self, directory: Path | None, embedder: Embedder, *, chunk_words: int = 100,
                 snapshot_every: int = 64) -> None:
        self.directory = directory
        self.embedder = embedder
        self.chunk_words = chunk_words
        self.snapshot_every = snapshot_every
        self.repairs: Counter[str] = Counter()
        self.before_remove: Callable[[frozenset[str]], object] = lambda ids: None
        self.guard: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext
        self.after_remove: Callable[[AddReport], object] = lambda report: None
        self._lock = threading.RLock()
        self._unsaved = 0
        self._generation = -1
        if directory is not None:
            private_dir(directory)
            self._check_legacy_meta()
        self._rows = ChunkRows(None if directory is None else directory / _DB, embedder.name,
                               embedder.dim)
        try:
            self._index = self._open_index()
            self._sync()
            self._save(force=self._unsaved > 0)  # at once when opening scrubbed old vectors
        except BaseException:
            self._rows.close()
            raise

    # -- opening -------------------------------------------------------------------------
    def _check_legacy_meta(self) -> None:
        assert self.directory is not None
        path = self.directory / _META
        try:
            meta = json.loads(path.read_text("utf-8")) if path.is_file() else {}
        except (OSError, ValueError):
            meta = {}
        if isinstance(meta, dict) and meta.get("embedder") not in (None, self.embedder.name):
            raise ValueError(
                f"knowledge bank at {self.directory} was built with embedder {meta.get('embedder')!r}, "
                f"not {self.embedder.name!r}; use the same embedder or a new store")

    def _open_index(self) -> HybridIndex:
        if self.directory is None or not (self.directory / "index" / "manifest.json").is_file():
            return HybridIndex(self.embedder.dim)
        snapshot = self.directory / "index"
        if self._rows.count() == 0:
            self._import_legacy(snapshot)
        try:
            with snapshot_lock(self.directory):  # a save deletes the files it replaces
                index = HybridIndex.load(snapshot)
        except (CorruptIndexError, ValueError, OSError) as exc:
            self.repairs["index_corrupt"] += 1
            log.warning("percache knowledge bank: %s; rebuilding the index from the database", exc)
            return HybridIndex(self.embedder.dim)
        self._unsaved += index.scrubbed  # the snapshot holds removed chunks' vectors: save it again
        return index if index.dim == self.embedder.dim else HybridIndex(self.embedder.dim)

    def _import_legacy(self, snapshot: Path) -> None:
        """Move the documents of a store written before the database held them."""
        legacy = read_legacy(snapshot)
        if legacy is None:
            return
        records, vectors = legacy
        try:
            chunks = [Chunk(**{k: v for k, v in r.items() if k != "label"}) for r in records]
        except (TypeError, ValueError):
            return
        if chunks and vectors.shape[1] == self.embedder.dim:
            self._rows.insert(chunks, vectors)
            log.info("percache knowledge bank: moved %d chunks of %s into %s", len(chunks), snapshot, _DB)

    # -- reconciling with the database ---------------------------------------------------
    def _sync(self) -> None:
        """Make the index hold exactly the database's chunks (cheap when nothing changed)."""
        generation = self._rows.generation()
        if generation == self._generation:
            return
        stored = self._rows.ids()
        held = {c.id for c in self._index.chunks()}
        if held - stored:
            self._index.remove(held - stored)
        missing = stored - held
        rows = self._rows.fetch(missing) if missing else []
        if rows:  # none when another process deleted them since ids(): gone
            lost = [i for i, (_, v) in enumerate(rows) if v is None]
            vectors = [v for _, v in rows]
            if lost:
                fresh = self.embedder.embed([rows[i][0].text for i in lost]).astype(np.float32)
                self.repairs["reembedded"] += len(lost)
                log.warning("percache knowledge bank: re-embedding %d chunk(s) whose stored "
                            "vectors were unusable", len(lost))
                for i, vector in zip(lost, fresh, strict=True):
                    vectors[i] = vector
                    with contextlib.suppress(Exception):  # best-effort repair of the row
                        self._rows.set_vector(rows[i][0].id, vector)
            filled = [v for v in vectors if v is not None]
            assert len(filled) == len(rows)
            self._index.add([c for c, _ in rows], np.stack(filled))
        index = self._index  # chunks passed on or given again since this bank last looked
        index.relabel(self._rows.relabelled(lambda i: index.chunk(i) if i in index else None, self._generation))
        self._generation = generation
        self.repairs["rows_repaired"] = self._rows.repaired

    @property
    def index(self) -> HybridIndex:
        """The hybrid index, reconciled with the database."""
        with self._lock:
            self._sync()
            return self._index

    # -- snapshots -----------------------------------------------------------------------
    def _save(self, *, force: bool = False) -> None:
        """Best-effort index snapshot (the database holds everything): a failure is logged."""
        if self.directory is None or not self._unsaved or (
                not force and self._unsaved < self.snapshot_every):
            return
        try:
            with snapshot_lock(self.directory):
                self._index.save(self.directory / "index")
            self._unsaved = 0
        except OSError as exc:
            self.repairs["snapshot_errors"] += 1
            log.warning("percache knowledge bank: saving the index snapshot failed (%s)", exc)

    def _write_meta(self) -> None:
        """``knowledge.json`` names the embedder for tools that open the store without one."""
        if self.directory is None or (self.directory / _META).is_file():
            return
        tmp = self.directory / f".{_META}.{uuid.uuid4().hex}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
            tmp.write_text(json.dumps({"embedder": self.embedder.name, "dim": self.embedder.dim}))
            os.replace(tmp, self.directory / _META)
        except OSError as exc:
            log.warning("percache knowledge bank: writing %s failed (%s)", _META, exc)
        finally:
            tmp.unlink(missing_ok=True)

    # -- public API ----------------------------------------------------------------------
    def add_documents(
        self, docs: Iterable[str | bytes | Mapping[str, object] | Document], *, scope: str | None = None
    ) -> AddReport:
        """Chunk, embed and store documents. ``scope`` applies to documents that carry none.

        A document whose id and scope are already in the bank replaces it: its chunks that the
        new text (or the current chunk size) no longer gives are removed in the same
        transaction (``AddReport.replaced_chunks``), unless another document holds them too (a
        paragraph two documents share stays while one of them has it; documents added before
        the bank recorded which documents hold a chunk count as holding only the chunks they
        stored). Every document is validated before anything is stored, so a
        bad one (empty, not UTF-8) raises naming it and leaves the bank unchanged. Once this
        returns, the chunks are in the database (committed), whatever other processes do."""
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
        with self.guard(), self._lock:
            self._sync()
            chunks: dict[str, Chunk] = {}
            given: dict[tuple[str, str], Chunk] = {}  # a document's first copy of a paragraph
            for doc in documents:
                for c in chunk_document(doc, target_words=self.chunk_words):
                    chunks.setdefault(c.id, c)
                    given.setdefault((c.id, c.doc_id), c)
            members = set(given)
            new = [c for c in chunks.values() if c.id not in self._index]
            dropped = {(cid, d.id) for d in documents if d.id is not None
                       for cid in self._rows.document_chunks(d.id, d.scope) if (cid, d.id) not in members}
            vectors = (embed_with_progress(self.embedder, [c.text for c in new]) if new
                       else np.zeros((0, self.embedder.dim), np.float32))
            if dropped:  # what was built on the old text goes first, as for a removal
                self.before_remove(frozenset(cid for cid, _ in dropped))
            changed, replaced, relabelled = self._rows.insert(new, vectors, members=members, dropped=dropped,
                                                              given=given.values())
            if changed:
                self._unsaved += changed
                self._sync()
                self._save(force=bool(replaced))  # the last snapshot holds the replaced text
                self._write_meta()
            scopes = {c.scope for c in new} | ({d.scope for d in documents} if replaced else set())
            return AddReport(len(documents), tuple(new), len(chunks) - len(new), tuple(replaced),
                             tuple(relabelled), tuple(scopes))

    def retrieve(self, query: str, k: int = 3, *, scope: str | None = None,
                 query_embedding: np.ndarray | None = None) -> list[Chunk]:
        """The ``k`` best chunks for ``query`` within ``scope``; ``None`` means unscoped
        chunks only (never every scope: one user's chunks never reach another's prompt)."""
        with self._lock:
            self._sync()
            if len(self._index) == 0:
                return []
            emb = query_embedding if query_embedding is not None else self.embedder.embed([query])[0]
            return [self._index.chunk(h.chunk_id)
                    for h in self._index.search(query, emb, k, scope=scope)]

    def retrieve_many(self, queries: Sequence[tuple[str, np.ndarray]], k: int = 3, *,
                      scope: str | None = None) -> list[list[Chunk]]:
        """:meth:`retrieve` of each ``(query, query_embedding)``, scored together, one sync."""
        with self._lock:
            self._sync()
            return [[self._index.chunk(h.chunk_id) for h in hits]
                    for hits in self._index.search_many(queries, k, scope=scope)]

    def chunk(self, chunk_id: str) -> Chunk:
        with self._lock:
            if chunk_id not in self._index:
                self._sync()
            return self._index.chunk(chunk_id)

    def chunks(self) -> list[Chunk]:
        """Every chunk in the bank, in the order added."""
        with self._lock:
            self._sync()
            return self._index.chunks()

    def chunk_ids(self) -> list[str]:
        return [c.id for c in self.chunks()]

    def remove_document(self, doc_id: str, scope: str | None) -> tuple[str, ...]:
        """Remove document ``doc_id`` of ``scope``; returns the ids of the chunks deleted. A
        paragraph another document holds too stays, and passes to that document."""
        with self.guard(), self._lock:
            self._sync()
            held = self._rows.document_chunks(doc_id, scope)
            if not held:
                return ()
            self.before_remove(frozenset(held))  # those passed to another holder move: theirs too
            changed, gone, _ = self._rows.insert([], np.zeros((0, self.embedder.dim), np.float32),
                                              dropped={(cid, doc_id) for cid in held})
            if changed:
                self._unsaved += changed
                self._sync()
                self._save(force=bool(gone))  # the last snapshot holds the removed text
                self._write_meta()
            if gone:
                self.after_remove(AddReport(0, (), 0, tuple(gone), scopes=(scope,)))
            return tuple(gone)

    def document_scopes(self, doc_id: str) -> set[str | None]:
        """The scopes in which a document ``doc_id`` has chunks."""
        with self._lock:
            return self._rows.document_scopes(doc_id)

    def document_chunks(self, doc_id: str, scope: str | None) -> set[str]:
        """The ids of the chunks document ``doc_id`` of ``scope`` stored or holds."""
        with self._lock:
            return self._rows.document_chunks(doc_id, scope)

    def remove_chunks(self, chunk_ids: Iterable[str]) -> int:
        """Remove chunks (unknown ids are ignored); returns how many."""
        ids = frozenset(chunk_ids)
        with self.guard(), self._lock:
            self.before_remove(ids)
            self._sync()
            scopes = {self._index.chunk(i).scope for i in ids if i in self._index}
            removed = self._rows.delete(ids)
            self._sync()
            self._unsaved += removed
            self._save(force=True)  # the last snapshot holds the removed text
            if removed:
                self.after_remove(AddReport(0, (), 0, tuple(sorted(ids)), scopes=tuple(scopes)))
            return removed

    def close(self) -> None:
        """Save an index snapshot if anything changed, and close the database."""
        with self._lock:
            try:
                if self._unsaved:
                    self._sync()  # chunks another handle removed since are not written back
                    self._save(force=True)
            finally:
                self._unsaved = 0  # closing again does nothing
                self._rows.close()

    def __len__(self) -> int:
        with self._lock:
            self._sync()
            return len(self._index)
