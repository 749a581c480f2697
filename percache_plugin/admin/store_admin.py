"""Look into a store and manage it: sizes, entries, hit counts, documents; remove, purge, clear.

Works on a store directory without loading any model: the knowledge bank, the QA bank and the
K/V store are opened through their own classes. Changes go through their public methods, so
each keeps its own invariants (atomic files, transactions, counters).

Reading works on a store in use. Changes (:meth:`StoreAdmin.remove_document`,
:meth:`StoreAdmin.purge`, :meth:`StoreAdmin.clear`) are refused while another process or
handle has the store open (it holds a shared lock on ``kv/.lock`` from ``enable()`` to
``close()``): a running handle keeps K/V and banks in memory and works on what it read. A
change holds that lock exclusively from its check to its end, so an ``enable()`` (or any K/V
store) opening meanwhile waits, before it reads anything, until the change is complete.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import numpy as np

from ..filemodes import private_dir
from ..kv.chunk_nodes import delete_chunk_kv
from ..kv.locks import DirectoryLock
from ..kv.store import DB_NAME, KVStore, stored_fingerprints
from ..personas.heads import HEADS_DIR as _PERSONA_HEADS
from ..predict.forget import built_on, forget_stored_predictions, stored_predicted_from
from ..rag.chunking import Chunk
from ..rag.knowledge import KnowledgeBank
from ..rag.qa_bank import QABank, QAEntry
from ..session.persist import SESSIONS_DB as _SESSIONS_DB
from ..session.persist import SESSIONS_DIR as _SESSIONS
from .store_info import DocumentInfo, FingerprintInfo, RemoveReport, StoreInfo, dir_bytes

__all__ = ["StoreAdmin", "StoreInfo", "DocumentInfo", "FingerprintInfo", "RemoveReport",
           "StoreInUseError"]

_KNOWLEDGE = "knowledge"
_KNOWLEDGE_META = "knowledge.json"
_LOCK_FILES = (".lock", ".write.lock")  # kv/: kept by clear() (see kv.locks.DirectoryLock, WriteLock)


class StoreInUseError(RuntimeError):
    """Another process has the store open."""


class _StoredEmbedder:
    """Stands in for the embedder a store was built with: the banks check its name when they
    open; the admin never embeds anything."""

    def __init__(self, name: str, dim: int) -> None:
        self.name = name
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("the store admin does not embed text; open the store with enable()")


class StoreAdmin:
    """Inspect and manage the store at ``path`` (a directory made by ``enable(store=...)``).

    :raises FileNotFoundError: when ``path`` is not a percache store.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if not (self.path / DB_NAME).is_file():
            raise FileNotFoundError(f"{str(self.path)!r} is not a percache store (no {DB_NAME} in it)")
        self._embedder = self._stored_embedder()
        self._knowledge: KnowledgeBank | None = None
        self._qa: QABank | None = None
        self._kv: dict[str, KVStore] = {}
        self._changing = False  # this admin holds kv/.lock exclusively (see exclusive)

    # -- opening the parts ---------------------------------------------------------------
    def _stored_embedder(self) -> _StoredEmbedder | None:
        meta = self.path / _KNOWLEDGE / _KNOWLEDGE_META
        if meta.is_file():
            data = json.loads(meta.read_text("utf-8"))
            return _StoredEmbedder(str(data["embedder"]), int(data["dim"]))
        return None

    @property
    def knowledge(self) -> KnowledgeBank | None:
        """The knowledge bank (None if no document was ever added)."""
        if self._knowledge is None and self._embedder is not None:
            self._knowledge = KnowledgeBank(self.path / _KNOWLEDGE, self._embedder)  # type: ignore[arg-type]
        return self._knowledge

    @property
    def qa_bank(self) -> QABank:
        if self._qa is None:
            embedder = self._embedder or _StoredEmbedder("unknown", 1)
            self._qa = QABank(self.path / DB_NAME, embedder, byte_limit=None)  # type: ignore[arg-type]
        return self._qa

    def kv_store(self, fingerprint: str) -> KVStore:
        """The K/V store of one fingerprint."""
        if fingerprint not in self._kv:
            self._kv[fingerprint] = KVStore(self.path, fingerprint=fingerprint, verify=False,
                                            shared_lock=not self._changing)
        return self._kv[fingerprint]

    def fingerprints(self) -> list[str]:
        """Model fingerprints with K/V in the store."""
        return list(stored_fingerprints(self.path))

    def stored_kv(self, fingerprint: str) -> KVStore | None:
        """The K/V store of ``fingerprint`` when the store holds K/V of it (:meth:`fingerprints`),
        else None: nothing is opened (opening a store makes its fingerprint's directory)."""
        return self.kv_store(fingerprint) if fingerprint in self.fingerprints() else None

    # -- reading -------------------------------------------------------------------------
    def info(self) -> StoreInfo:
        """Sizes by kind, entries, hit counts and the fingerprints present."""
        info = StoreInfo(self.path)
        info.bytes_kv = dir_bytes(self.path / "kv")
        info.bytes_knowledge = dir_bytes(self.path / _KNOWLEDGE)
        info.bytes_database = sum(f.stat().st_size for f in self.path.glob(DB_NAME + "*"))
        chunks = self.chunks()
        info.chunks = len(chunks)
        info.documents = len({(c.doc_id, c.scope) for c in chunks})
        info.embedder = None if self._embedder is None else self._embedder.name
        entries = self.qa_bank.entries()
        info.qa_entries = len(entries)
        info.qa_answered = sum(e.answer is not None for e in entries)
        info.qa_stale = sum(e.stale for e in entries)
        info.qa_hits = sum(e.hits for e in entries)
        info.bytes_qa = sum(e.nbytes for e in entries)
        for fp in self.fingerprints():
            nodes = self.kv_store(fp).nodes()
            info.fingerprints.append(FingerprintInfo(
                fp, len(nodes), sum(n.n_tokens for n in nodes), sum(n.nbytes for n in nodes),
                sum(n.hits for n in nodes)))
        return info

    def chunks(self) -> list[Chunk]:
        kb = self.knowledge
        return [] if kb is None else kb.chunks()

    def documents(self) -> list[DocumentInfo]:
        """Every document with its chunk count and the QA entries built on its chunks."""
        by_doc: dict[tuple[str, str | None], list[Chunk]] = {}
        for c in self.chunks():
            by_doc.setdefault((c.doc_id, c.scope), []).append(c)
        entries = self.qa_bank.entries()
        out = []
        for (doc_id, scope), chunks in by_doc.items():
            ids = {c.id for c in chunks}
            out.append(DocumentInfo(doc_id, scope, len(chunks), sum(len(c.text.split()) for c in chunks),
                                    sum(1 for e in entries if ids.intersection(e.sources))))
        return out

    def qa_entries(self) -> list[QAEntry]:
        return self.qa_bank.entries()

    # -- changing ------------------------------------------------------------------------
    def remove_document(self, doc_id: str, *, scope: str | None = None) -> RemoveReport:
        """Remove a document: its chunks, the K/V built on them (every fingerprint, with the
        prefix-tree nodes computed after them), the QA entries whose answers used them, the
        abstracts summarizing them and the idle tasks naming them.
        ``scope`` narrows the match when the same id exists in several scopes.

        :raises KeyError: when no chunk belongs to ``doc_id``.
        """
        with self.exclusive("remove a document from"):
            kb = self.knowledge
            held_in = set() if kb is None else kb.document_scopes(doc_id)
            scopes = held_in if scope is None else held_in & {scope}
            if kb is None or not scopes:
                if held_in:  # held, in other scopes
                    raise KeyError(f"no document {doc_id!r} in scope {scope!r} in {self.path} "
                                   f"(its scopes: {sorted(held_in, key=str)})")
                known = sorted({c.doc_id for c in self.chunks()})
                raise KeyError(f"no document {doc_id!r} in {self.path} (documents: {known[:10]})")
            held = {cid for s in scopes for cid in kb.document_chunks(doc_id, s)}
            # The answers and K/V built on every chunk it holds go first (a crash between the
            # steps leaves the document with less cache, never an answer without its source);
            # then its chunks, but a paragraph another document holds too stays, passed to it.
            qa = built_on(self.qa_bank.entries(), held, stored_predicted_from(self.path / DB_NAME, held))
            for entry_id in qa:
                self.qa_bank.delete(entry_id)
            kv_nodes = delete_chunk_kv((self.kv_store(fp) for fp in self.fingerprints()), held)
            forget_stored_predictions(self.path / DB_NAME, held)  # built again by a handle
            gone = [cid for s in scopes for cid in kb.remove_document(doc_id, s)]
            # BM25 reweighs the scope: with no handle's retrieval settings to re-check, none is served
            stale = self.qa_bank.mark_stale_for((), lambda q, s, v: None, lambda model, s: s in scopes)
            return RemoveReport(len(scopes), len(gone), kv_nodes, len(qa), len(stale))

    def purge(self, keep: str | None = None) -> int:
        """Remove the K/V of every fingerprint but ``keep`` (a fingerprint or a prefix naming
        one; None: the fingerprint that wrote most recently); returns the number of nodes removed.

        :raises ValueError: ``keep`` names no stored fingerprint, or several (nothing is removed:
            a mistyped prefix must not purge every fingerprint)."""
        with self.exclusive("purge"):
            return self._purge(keep)

    def _purge(self, keep: str | None) -> int:
        fps = self.fingerprints()
        if not fps:
            return 0
        if keep is None:
            keep = max(fps, key=lambda fp: max((n.created for n in self.kv_store(fp).nodes()), default=0.0))
        matches = [fp for fp in fps if fp.startswith(keep)]
        if len(matches) != 1:
            raise ValueError(f"fingerprint prefix {keep!r} is "
                             f"{'ambiguous' if matches else 'not in the store'}: {matches or fps}")
        keep = matches[0]
        removed = 0
        for fp in fps:
            if fp == keep:
                continue
            store = self.kv_store(fp)
            for root in store.children(None):
                removed += store.delete(root.key, with_descendants=True)
        return removed

    def clear(self) -> None:
        """Delete everything in the store (K/V of every model, documents, QA bank, idle queue,
        prediction state), all but the two empty lock files in ``kv/``, which a store opening
        meanwhile already holds. Refuses when another process has the store open."""
        with self.exclusive("clear"):
            for child in self.path.iterdir():
                if child.is_dir() and child.name == "kv":
                    for part in child.iterdir():
                        if part.is_dir():
                            shutil.rmtree(part)
                        elif part.name not in _LOCK_FILES:
                            part.unlink()
                elif child.is_dir() and child.name in (_KNOWLEDGE, _SESSIONS, _PERSONA_HEADS):
                    shutil.rmtree(child)
                elif child.name.startswith((DB_NAME, _SESSIONS_DB)):
                    child.unlink()

    @contextmanager
    def exclusive(self, action: str) -> Iterator[None]:
        """Hold ``kv/.lock`` exclusively for a change: stores opening meanwhile wait for its end.

        :raises StoreInUseError: another process or handle has the store open."""
        self.close()  # this admin's own K/V stores hold the shared lock too
        lock = DirectoryLock(private_dir(self.path / "kv"))
        try:
            if not lock.exclusive:
                raise StoreInUseError(
                    f"cannot {action} store {str(self.path)!r}: it is open in another process or "
                    "handle; close it (pc.close()) and retry")
            self._changing = True
            try:
                yield
            finally:
                self.close()  # its stores opened without the lock: none outlives the change
                self._changing = False
        finally:
            lock.close()

    def close(self) -> None:
        for store in self._kv.values():
            store.close()
        self._kv.clear()
        if self._qa is not None:
            self._qa.close()
            self._qa = None
        self._knowledge = None

    def __enter__(self) -> StoreAdmin:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
