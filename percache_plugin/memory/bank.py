"""The memory bank: facts (L2) in SQLite, searchable by BM25 + embeddings within one scope.

The rows (:mod:`.rows`) are the source of truth; the in-memory :class:`HybridIndex` holds the
active facts and is reconciled with the rows by their generation counter before every use,
so facts written by another handle are seen at once. Searches never cross scopes (``None``
is the unscoped memory, not "every scope").

Written policies:

- **Duplicates.** A fact whose normalised text (:func:`.text.normalize`) equals an active
  fact of the scope, or whose embedding has cosine >= ``near_duplicate`` with one, is not
  stored again: the existing fact is returned (``AddResult.status``) and its history records
  the re-add. Adding the same fact twice never deletes or changes it. Duplicates compare the
  facts' own texts, never their retrieval context.
- **Retrieval keys.** A fact with ``metadata["context"]`` (the turn it was extracted from) is
  searched by its text followed by that context (BM25 and embedding: contextual retrieval);
  what a search returns, and what prompts show, is the fact alone.
- **Conflicts.** A fact with a ``subject`` (``metadata["subject"]``) supersedes the active
  facts of the same scope and normalised subject: they become ``superseded`` (kept, listed by
  :meth:`MemoryBank.list` with ``superseded=True`` and in :meth:`history`, never served).
  The newer fact is the one added (or updated with that subject) later. Facts without a
  subject never supersede anything.
"""

from __future__ import annotations

import builtins
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..rag.chunking import Chunk
from ..rag.embeddings import Embedder
from ..rag.index import HybridIndex
from .rows import Fact, FactRows, HistoryEvent
from .text import CONTEXT, key_text, normalize, subject_key

__all__ = ["AddResult", "FactHit", "MemoryBank", "UnknownFact", "check_fact_id", "check_metadata", "check_scope",
           "fact_chunk"]

DOC_ID = "memory"


class UnknownFact(KeyError):
    """No fact of that id (a forgotten fact's id names its tombstone)."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class AddResult:
    """What :meth:`MemoryBank.add` did: ``status`` is ``added``, ``duplicate`` (same
    normalised text) or ``near_duplicate`` (embedding within ``near_duplicate``); ``fact`` is
    the stored fact (the existing one for a duplicate); ``superseded`` the ids it replaced."""

    fact: Fact
    status: str
    superseded: tuple[str, ...] = ()


@dataclass(frozen=True)
class FactHit:
    """A search result: the fused rank score and the cosine similarity to the query."""

    fact: Fact
    score: float
    similarity: float


def check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """``metadata`` as a dict of str to str (TypeError naming the bad entry)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping of str to str, got {type(metadata).__name__}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"metadata must map str to str; {key!r}: {value!r} is not")
    return dict(metadata)


def check_scope(scope: object) -> str | None:
    """``scope`` when it is a memory scope (a str, or None: the unscoped memory); else TypeError."""
    if scope is not None and not isinstance(scope, str):
        raise TypeError(f"scope must be a str or None, got {type(scope).__name__}")
    return scope


def check_fact_id(fact_id: object) -> str:
    """``fact_id`` when it is a str; else TypeError naming its type."""
    if not isinstance(fact_id, str):
        raise TypeError(f"a fact id must be a str, got {type(fact_id).__name__}")
    return fact_id


class MemoryBank:
    """Facts of one store (``path`` None: in memory); thread-safe.

    :param path: the store's SQLite file (shared with the K/V index and the QA bank).
    :param embedder: embeds facts and queries; a reopened memory refuses another one.
    :param near_duplicate: cosine at or above which a new fact is a near-duplicate.
    """

    def __init__(self, path: Path | None, embedder: Embedder, *, near_duplicate: float = 0.95) -> None:
        if not 0.0 < near_duplicate <= 1.0:
            raise ValueError(f"near_duplicate must be in (0, 1], got {near_duplicate!r}")
        self.embedder = embedder
        self.near_duplicate = near_duplicate
        self._rows = FactRows(path, embedder.name, embedder.dim)
        self._lock = threading.RLock()
        self._index = HybridIndex(embedder.dim)
        self._text_vectors: dict[str, np.ndarray] = {}  # of the indexed facts' own text
        self._generation = -1
        self._pending: builtins.list[tuple[Fact, np.ndarray]] = []  # added in the open transaction
        # called with what an add or update stored once it is committed (the facts added,
        # updated or superseded: what ask() may retrieve changed)
        self.committed: builtins.list[Callable[[builtins.list[AddResult]], object]] = []

    def close(self) -> None:
        self._rows.close()

    # -- the index ----------------------------------------------------------------------
    def _sync(self) -> None:
        generation = self._rows.generation()
        if generation == self._generation:
            return
        self._index = HybridIndex(self.embedder.dim)
        active = self._rows.active_vectors()
        self._text_vectors = {i: v for i, (_, v, _) in active.items()}
        if active:
            chunks = [Chunk(f.id, DOC_ID, 0, key_text(f.text, f.metadata), f.scope, f.metadata)
                      for f, _, _ in active.values()]
            self._index.add(chunks, np.stack([v if k is None else k for _, v, k in active.values()]))
        self._generation = generation

    def _embed(self, text: str) -> np.ndarray:
        return np.asarray(self.embedder.embed([text])[0], dtype=np.float32)

    # -- API ------------------------------------------------------------------------------
    def add(self, text: str, scope: str | None = None,
            metadata: Mapping[str, str] | None = None) -> AddResult:
        """Store a fact (see the module docstring for duplicates and conflicts)."""
        return self.add_many([(text, scope, metadata)])[0]

    def add_many(self, items: Sequence[tuple[str, str | None, Mapping[str, str] | None]]
                 ) -> builtins.list[AddResult]:
        """Store several facts in one transaction: all of them or, on any error or a crash,
        none (a fact is never stored in part)."""
        checked = [_checked(text, scope, metadata) for text, scope, metadata in items]
        if not checked:
            return []
        vectors = np.asarray(self.embedder.embed([text for text, _, _ in items]), dtype=np.float32)
        keys = self._keys([(text, meta) for (text, _, _), (_, meta, _) in zip(items, checked, strict=True)])
        with self._lock:
            self._pending = []
            try:
                with self._rows.tx():
                    self._sync()
                    results = [self._add(text, norm, meta, scope, vector, key)
                               for (text, _, _), (norm, meta, scope), vector, key
                               in zip(items, checked, vectors, keys, strict=True)]
            finally:
                self._pending = []
        for fn in self.committed:
            fn(results)
        return results

    def _keys(self, items: Sequence[tuple[str, Mapping[str, str]]]) -> builtins.list[np.ndarray | None]:
        """The vectors of the facts' texts with their retrieval context (None: no context)."""
        texts = [(i, key_text(text, meta)) for i, (text, meta) in enumerate(items) if meta.get(CONTEXT)]
        out: builtins.list[np.ndarray | None] = [None] * len(items)
        if texts:
            vectors = np.asarray(self.embedder.embed([t for _, t in texts]), dtype=np.float32)
            for (i, _), vector in zip(texts, vectors, strict=True):
                out[i] = vector
        return out

    def _add(self, text: str, norm: str, meta: dict[str, str], scope: str | None,
             vector: np.ndarray, key: np.ndarray | None) -> AddResult:
        same = self._rows.with_norm(scope, norm) or self._near(vector, scope)
        if same is not None:
            self._rows.log(same.id, "readded", text, meta)
            status = "duplicate" if normalize(same.text) == norm else "near_duplicate"
            return AddResult(same, status)
        now = time.time()
        subject = subject_key(meta.get("subject"))
        fact = Fact("m" + uuid.uuid4().hex[:16], text, scope, meta, now, now, subject=subject)
        old = [f.id for f in self._rows.with_subject(scope, subject)] if subject else []
        self._rows.insert(fact, norm, vector, key)
        self._rows.supersede(old, fact.id)
        self._pending.append((fact, vector))
        return AddResult(fact, "added", tuple(old))

    def _near(self, vector: np.ndarray, scope: str | None) -> Fact | None:
        """An active fact of ``scope`` within ``near_duplicate`` cosine (indexed, or added
        earlier in this transaction)."""
        ids = [c.id for c in self._index.chunks() if c.scope == scope]
        rows = [np.stack([self._text_vectors[i] for i in ids])] if ids else []
        pending = [(f, v) for f, v in self._pending if f.scope == scope]
        ids += [f.id for f, _ in pending]
        rows += [np.stack([v for _, v in pending])] if pending else []
        if not ids:
            return None
        sims = np.concatenate(rows) @ vector
        best = int(np.argmax(sims))
        found = self._rows.get(ids[best]) if sims[best] >= self.near_duplicate else None
        return found if found is not None and found.status == "active" else None

    def search(self, query: str, scope: str | None = None, k: int = 5, *,
               embedding: np.ndarray | None = None) -> builtins.list[FactHit]:
        """The ``k`` best active facts of ``scope`` for ``query``, best first."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty str, got {query!r}")
        scope = check_scope(scope)
        emb = self._embed(query) if embedding is None else np.asarray(embedding, np.float32).reshape(-1)
        with self._lock:
            self._sync()
            hits = self._index.search(query, emb, k, scope=scope)
            if not hits:
                return []
            sims = self._index.vectors([h.chunk_id for h in hits]) @ (emb / np.linalg.norm(emb))
            out = []
            for hit, sim in zip(hits, sims, strict=True):
                fact = self._rows.get(hit.chunk_id)
                if fact is not None:
                    out.append(FactHit(fact, hit.score, float(sim)))
            return out

    def get(self, fact_id: str) -> Fact:
        fact = self._rows.get(check_fact_id(fact_id))
        if fact is None:
            gone = " (forgotten)" if self._rows.tombstoned(fact_id) else ""
            if self._rows.get(fact_id, loose=True) is not None:
                gone = " (its row is corrupt: forget() removes it)"
            raise UnknownFact(f"no fact {fact_id!r}{gone}")
        return fact

    @property
    def corrupt(self) -> builtins.list[str]:
        """Ids of the rows skipped so far because they cannot be read (never served)."""
        return sorted(self._rows.corrupt)

    def find(self, fact_id: str) -> Fact | None:
        """The fact of this id in any status, or None."""
        return self._rows.get(fact_id)

    def list(self, scope: str | None = None, *, superseded: bool = False) -> builtins.list[Fact]:
        """Facts of ``scope`` in the order added (active only unless ``superseded``)."""
        return self._rows.select(check_scope(scope), status=None if superseded else "active")

    def scopes(self) -> builtins.list[str | None]:
        return self._rows.scopes()

    def update(self, fact_id: str, text: str, metadata: Mapping[str, str] | None = None) -> Fact:
        """Replace a fact's text (and metadata, when given); the old version goes to its
        history. Its stored K/V keys are dropped (the caller deletes the K/V). An active fact
        with a subject supersedes the other active facts of that subject, as an added one does."""
        with self._lock, self._rows.tx():
            fact = self.get(fact_id)
            meta_in = fact.metadata if metadata is None else metadata
            norm, meta, _ = _checked(text, fact.scope, meta_in)
            subject = subject_key(meta.get("subject"))
            self._rows.replace_text(fact, text, norm, meta, subject, self._embed(text),
                                    self._keys([(text, meta)])[0])
            # the updated fact is the newer one of its subject (one active fact per subject)
            old = [f.id for f in self._rows.with_subject(fact.scope, subject) if f.id != fact_id] \
                if subject and fact.status == "active" else []
            self._rows.supersede(old, fact_id)
        updated = replace(self.get(fact_id), kv_keys=())
        for fn in self.committed:
            fn([AddResult(updated, "updated", tuple(old))])
        return updated

    def history(self, fact_id: str) -> builtins.list[HistoryEvent]:
        """Every change of the fact, oldest first (raises :class:`UnknownFact` when unknown
        or forgotten: forgetting removes the history too)."""
        self.get(fact_id)
        return self._rows.history(fact_id)

    def set_kv_keys(self, fact_id: str, keys: builtins.list[str]) -> None:
        with self._lock, self._rows.tx():
            self._rows.set_kv_keys(fact_id, keys)

    def forget(self, fact_id: str) -> Fact:
        """Remove the fact and its history (a tombstone keeps the id); returns what was
        removed, so the caller can drop its K/V and cached answers, then :meth:`scrub`."""
        with self._lock, self._rows.tx():
            fact = self._rows.get(fact_id, loose=True) or self.get(fact_id)  # a corrupt row too
            self._rows.forget(fact_id)
        self._rows.corrupt.discard(fact_id)
        with self._lock:
            self._sync()
        return fact

    def tombstoned(self, fact_id: str) -> bool:
        return self._rows.tombstoned(check_fact_id(fact_id))

    def drop_readded(self, dropped: Callable[[Mapping[str, str]], bool]) -> int:
        """Delete the ``readded`` history events whose metadata ``dropped`` accepts (an event
        keeps the text added again: a deleted session's wording of a fact kept)."""
        with self._lock, self._rows.tx():
            return self._rows.drop_events("readded", dropped)

    def scrub(self) -> bool:
        """Checkpoint and truncate the WAL (see :meth:`FactRows.scrub`)."""
        with self._lock:
            return self._rows.scrub()

    def __len__(self) -> int:
        with self._lock:
            self._sync()
            return len(self._index)


def _chunk(fact: Fact) -> Chunk:
    return Chunk(fact.id, DOC_ID, 0, fact.text, fact.scope, fact.metadata)


def fact_chunk(fact: Fact) -> Chunk:
    """A fact as a retrievable chunk (id = fact id), for prompts built from chunks."""
    return _chunk(fact)


def _checked(text: object, scope: object, metadata: Mapping[str, str] | None
             ) -> tuple[str, dict[str, str], str | None]:
    if not isinstance(text, str):
        raise TypeError(f"a fact's text must be a str, got {type(text).__name__}")
    norm = normalize(text)
    if not norm:
        raise ValueError(f"a fact needs at least one word, got {text!r}")
    return norm, check_metadata(metadata), check_scope(scope)
