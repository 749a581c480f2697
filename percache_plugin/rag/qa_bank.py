"""The QA bank: answered questions, found again by embedding similarity (PerCache 4.2.1).

A new question whose embedding is close enough (cosine ``>= tau``) to a stored question
of the same scope gets the stored answer without any inference, if the guards in
:mod:`percache_plugin.rag.guards` pass. Entries can be listed, corrected and deleted;
the bank holds at most ``byte_limit`` bytes and evicts least-frequently-served entries
(ties: least recently served, then oldest).

Storage: the ``qa_*`` tables of the store's SQLite file (WAL), one row per entry with its
question embedding as a float32 blob, so reopening never re-embeds. Every change is one
transaction; memory is updated only after the commit. Vectors also live in memory, one
partition per scope: an exact scan while a partition is small, an HNSW index (hnswlib)
once it holds more than ``exact_search_limit`` entries. One ``QABank`` per database file
per process: two instances on one file do not see each other's changes.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Literal

import hnswlib
import numpy as np

from percache_plugin.rag.embeddings import Embedder
from percache_plugin.rag.guards import (
    DEFAULT_MIN_OVERLAP,
    REASONS,
    QuestionTerms,
    Verdict,
    check_min_overlap,
    check_tau,
    judge,
    question_terms,
    terms_agree,
)
from percache_plugin.sqlite_tx import transaction

__all__ = [
    "ALL_SCOPES",
    "DEFAULT_BYTE_LIMIT",
    "EntryTooLargeError",
    "LookupResult",
    "Origin",
    "QABank",
    "QAEntry",
    "QAMatch",
]

log = logging.getLogger("percache")

Origin = Literal["user", "predicted", "corrected"]
DEFAULT_BYTE_LIMIT: Final = 100 * 2**20
_ORIGINS = ("user", "predicted", "corrected")
_SCHEMA_VERSION = "1"
_ENTRY_OVERHEAD = 64  # bytes charged per entry for the row and index bookkeeping
_BUSY_TIMEOUT_S = 10.0
_SCHEMA = """
CREATE TABLE IF NOT EXISTS qa_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS qa_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT, question TEXT NOT NULL, qkey TEXT NOT NULL,
    answer TEXT, scope TEXT, scope_key TEXT NOT NULL, sources TEXT NOT NULL,
    stale INTEGER NOT NULL DEFAULT 0, hits INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL, last_access REAL NOT NULL, origin TEXT NOT NULL,
    nbytes INTEGER NOT NULL, vector BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS qa_entries_key ON qa_entries (scope_key, qkey);
CREATE INDEX IF NOT EXISTS qa_entries_lfu ON qa_entries (hits, last_access, id);
"""
_COLS = "id, question, answer, scope, sources, stale, hits, created, last_access, origin, nbytes"


class _AllScopes:
    def __repr__(self) -> str:
        return "ALL_SCOPES"


ALL_SCOPES: Final = _AllScopes()
"""``entries(scope=ALL_SCOPES)`` lists every scope; ``scope=None`` only unscoped entries."""


class EntryTooLargeError(ValueError):
    """An entry is larger than the bank's whole byte limit."""


@dataclass(frozen=True)
class QAEntry:
    """A stored question. ``answer`` is ``None`` for a prefill-only entry; ``sources`` are
    the chunk ids the answer was generated from; ``hits`` counts served lookups (LFU);
    ``nbytes`` is what the entry counts against the byte limit."""

    id: int
    question: str
    answer: str | None
    scope: str | None
    sources: tuple[str, ...]
    stale: bool
    hits: int
    created: float
    last_access: float
    origin: str
    nbytes: int


@dataclass(frozen=True)
class QAMatch:
    """A candidate with its cosine similarity and the guard outcomes (see ``guards``)."""

    entry: QAEntry
    similarity: float
    guards: Mapping[str, bool | float]


@dataclass(frozen=True)
class LookupResult:
    """``match``: the entry served, or ``None``. ``best``: the most similar candidate of
    the question's scope (``None`` if the scope is empty). ``rejected_by``: on a miss, the
    first guard the best candidate failed (``threshold``, ``terms``, ``stale``,
    ``no_answer``, ``consistency``); ``None`` when the scope holds nothing. Nothing in a result
    depends on what other scopes hold."""

    match: QAMatch | None
    best: QAMatch | None
    rejected_by: str | None


@dataclass
class _Slot:  # what search and guards need, kept in memory
    scope: str | None
    key: str
    terms: QuestionTerms
    sources: tuple[str, ...]
    stale: bool
    answered: bool
    nbytes: int = 0


class _Partition:
    """The question vectors of one scope, searched exactly while there are at most
    ``exact_limit`` of them and through an HNSW index (labels = entry ids) beyond."""

    def __init__(self, dim: int, exact_limit: int) -> None:
        self._exact_limit = exact_limit
        self._vectors = np.zeros((16, dim), dtype=np.float32)
        self._ids = np.zeros(16, dtype=np.int64)
        self._row: dict[int, int] = {}
        self._hnsw: hnswlib.Index | None = None

    def __len__(self) -> int:
        return len(self._row)

    def add(self, entry_id: int, vector: np.ndarray) -> None:
        n = len(self._row)
        if n == len(self._ids):
            self._vectors = np.concatenate([self._vectors, np.zeros_like(self._vectors)])
            self._ids = np.concatenate([self._ids, np.zeros_like(self._ids)])
        self._vectors[n], self._ids[n], self._row[entry_id] = vector, entry_id, n
        if self._hnsw is not None:
            if self._hnsw.element_count >= self._hnsw.max_elements:
                self._hnsw.resize_index(2 * self._hnsw.max_elements)
            self._hnsw.add_items(vector[None], [entry_id], num_threads=1, replace_deleted=True)

    def remove(self, entry_id: int) -> None:
        row, last = self._row.pop(entry_id), len(self._row)
        if row != last:  # move the last row into the hole
            moved = int(self._ids[last])
            self._vectors[row], self._ids[row], self._row[moved] = self._vectors[last], moved, row
        if self._hnsw is not None:
            self._hnsw.mark_deleted(entry_id)

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` most similar entries as ``(id, cosine)``, best first (ties: lower id)."""
        n = len(self._row)
        k = min(k, n)
        if k == 0:
            return []
        if n <= self._exact_limit:
            self._hnsw = None
            rows = np.arange(n)
        else:
            rows = self._approximate(vector, k)
        sims = self._vectors[rows] @ vector
        order = np.lexsort((self._ids[rows], -sims))[:k]
        return [(int(self._ids[rows[i]]), float(sims[i])) for i in order]

    def _approximate(self, vector: np.ndarray, k: int) -> np.ndarray:
        if self._hnsw is None:
            n, dim = len(self._row), self._vectors.shape[1]
            self._hnsw = hnswlib.Index(space="cosine", dim=dim)
            self._hnsw.init_index(
                max_elements=2 * n, M=16, ef_construction=100, allow_replace_deleted=True
            )
            self._hnsw.add_items(self._vectors[:n], self._ids[:n], num_threads=1)
        self._hnsw.set_ef(max(64, 4 * k))
        try:
            labels, _ = self._hnsw.knn_query(vector[None], k=k)
        except RuntimeError:  # the walk found fewer than k live items: scan exactly
            return np.arange(len(self._row))
        return np.array([self._row[int(label)] for label in labels[0]])


def _qkey(question: str) -> str:
    return " ".join(question.casefold().split())


def _check_question(question: object) -> str:
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question must be a non-empty str, got {question!r}")
    return question.strip()


def _check_answer(answer: object, *, optional: bool) -> str | None:
    if answer is None and optional:
        return None
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a str{' or None' if optional else ''}, got {answer!r}")
    return answer


def _check_scope(scope: object) -> str | None:
    if scope is not None and (not isinstance(scope, str) or not scope):
        raise ValueError(f"scope must be a non-empty str or None, got {scope!r}")
    return scope


def _check_ids(ids: object, what: str) -> tuple[str, ...]:
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise TypeError(f"{what} must be a sequence of chunk ids (str), got {ids!r}")
    items = tuple(ids)
    bad = [i for i in items if not isinstance(i, str)]
    if bad:
        raise TypeError(f"{what} must hold chunk ids (str), got {bad[0]!r}")
    return tuple(dict.fromkeys(items))


def _check_limit(limit: object) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"byte_limit must be a non-negative int or None, got {limit!r}")
    return limit


class QABank:
    """Answered questions of one store, searchable by meaning; thread-safe.

    :param path: the SQLite database file (the store's ``percache.sqlite3``), shared with
        the other components; ``None`` keeps the bank in memory.
    :param embedder: embeds questions; a bank refuses to open with another embedder
        (by ``name``) than the one its stored vectors came from.
    :param byte_limit: most bytes of entries kept (``None``: no limit); see ``QAEntry.nbytes``.
    :param exact_search_limit: a scope with more entries is searched through HNSW
        (approximate, sub-millisecond) instead of an exact scan.
    """

    def __init__(
        self,
        path: Path | str | None,
        embedder: Embedder,
        *,
        byte_limit: int | None = DEFAULT_BYTE_LIMIT,
        exact_search_limit: int = 4096,
    ) -> None:
        if not callable(getattr(embedder, "embed", None)):
            raise TypeError(f"embedder must have an embed() method, got {type(embedder).__name__}")
        if isinstance(exact_search_limit, bool) or not isinstance(exact_search_limit, int):
            raise ValueError(f"exact_search_limit must be an int, got {exact_search_limit!r}")
        self._embedder = embedder
        self._byte_limit = _check_limit(byte_limit)
        self._exact_limit = max(1, exact_search_limit)
        self._lock = threading.RLock()
        self._closed = False
        self._dim: int | None = None
        self._slots: dict[int, _Slot] = {}
        self._keys: dict[tuple[str | None, str], int] = {}
        self._parts: dict[str | None, _Partition] = {}
        self._total = 0
        self._counters: Counter[str] = Counter()
        self.path = None if path is None else Path(path).expanduser()
        if self.path is not None and self.path.is_dir():
            raise IsADirectoryError(
                f"QA bank path {str(self.path)!r} is a directory; pass the database file, "
                f"e.g. {str(self.path / 'percache.sqlite3')!r}"
            )
        target = ":memory:" if self.path is None else str(self.path)
        try:
            self._db = sqlite3.connect(
                target, timeout=_BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise PermissionError(f"cannot open QA bank database {target!r}: {exc}") from None
        try:
            if self.path is not None:
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(_SCHEMA)
            with self._tx():
                self._check_meta()
            self._load()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------

    def _meta(self, name: str) -> str | None:
        row = self._db.execute("SELECT value FROM qa_meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def _check_meta(self) -> None:
        schema = self._meta("schema")
        if schema is None:
            self._db.execute("INSERT INTO qa_meta VALUES ('schema', ?)", (_SCHEMA_VERSION,))
        elif schema != _SCHEMA_VERSION:
            raise ValueError(f"QA bank {self.path} has schema {schema}, expected {_SCHEMA_VERSION}")
        stored, dim = self._meta("embedder"), self._meta("dim")
        if stored is None or dim is None:
            return
        if self._db.execute("SELECT 1 FROM qa_entries LIMIT 1").fetchone() is None:
            self._db.execute("DELETE FROM qa_meta WHERE name IN ('embedder', 'dim')")
            return
        if stored != self._embedder.name:
            raise ValueError(
                f"QA bank {self.path} holds question vectors of embedder {stored!r}; open it "
                f"with that embedder, not {self._embedder.name!r} (or delete its qa_ tables)"
            )
        self._dim = int(dim)

    def _load(self) -> None:
        rows = self._db.execute(
            "SELECT id, question, qkey, answer IS NOT NULL, scope, sources, stale, nbytes, "
            "vector FROM qa_entries ORDER BY id"
        )
        for entry_id, question, key, answered, scope, sources, stale, nbytes, blob in rows:
            vector = np.frombuffer(blob, dtype=np.float32)
            if self._dim is None or vector.size != self._dim:
                raise ValueError(
                    f"QA bank {self.path}: entry {entry_id} has a {vector.size}-float vector, "
                    f"expected {self._dim}; the database is corrupt"
                )
            slot = _Slot(
                scope,
                key,
                question_terms(question),
                tuple(json.loads(sources)),
                bool(stale),
                bool(answered),
                nbytes,
            )
            self._remember(entry_id, slot, vector)

    # -- helpers -------------------------------------------------------------------------

    def _tx(self) -> AbstractContextManager[None]:
        return transaction(self._db)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the QA bank is closed")

    def _remember(self, entry_id: int, slot: _Slot, vector: np.ndarray) -> None:
        self._slots[entry_id] = slot
        self._keys[(slot.scope, slot.key)] = entry_id
        part = self._parts.get(slot.scope)
        if part is None:
            assert self._dim is not None
            part = self._parts[slot.scope] = _Partition(self._dim, self._exact_limit)
        part.add(entry_id, vector)
        self._total += slot.nbytes

    def _forget(self, entry_id: int) -> None:
        slot = self._slots.pop(entry_id)
        del self._keys[(slot.scope, slot.key)]
        part = self._parts[slot.scope]
        part.remove(entry_id)
        if not len(part):
            del self._parts[slot.scope]
        self._total -= slot.nbytes

    def _vector(self, question: str, embedding: object) -> np.ndarray:
        raw = self._embedder.embed([question]) if embedding is None else embedding
        vector = np.array(raw, dtype=np.float32)
        if vector.ndim == 2 and vector.shape[0] == 1:
            vector = vector[0]
        dim = self._dim
        if dim is None and embedding is not None:  # a caller's vector: check the size
            dim = int(self._embedder.dim)
        if vector.ndim != 1 or (dim is not None and vector.size != dim):
            raise ValueError(
                f"question embedding must have shape [{dim or 'dim'}], got {np.shape(raw)}"
            )
        norm = float(np.linalg.norm(vector))
        if not np.isfinite(vector).all() or norm == 0.0:
            raise ValueError("question embedding is all-zero or not finite")
        return vector / norm

    def _entry_bytes(self, question: str, answer: str | None, sources: str, dim: int) -> int:
        text = len(question.encode()) + len((answer or "").encode()) + len(sources.encode())
        return text + 4 * dim + _ENTRY_OVERHEAD

    def _fetch(self, entry_id: int) -> QAEntry:
        row = self._db.execute(
            f"SELECT {_COLS} FROM qa_entries WHERE id = ?", (entry_id,)
        ).fetchone()
        if row is None:
            raise KeyError(f"no QA bank entry {entry_id}")
        return _entry(row)

    def _fits(self, nbytes: int) -> None:
        if self._byte_limit is not None and nbytes > self._byte_limit:
            raise EntryTooLargeError(
                f"QA entry of {nbytes} bytes exceeds the whole byte limit ({self._byte_limit})"
            )

    def _victims(self, total: int, protect: int | None) -> list[int]:
        """LFU order: fewest hits, then least recently served, then oldest."""
        if self._byte_limit is None or total <= self._byte_limit:
            return []
        victims: list[int] = []
        rows = self._db.execute(
            "SELECT id, nbytes FROM qa_entries WHERE id IS NOT ? ORDER BY hits, last_access, id",
            (protect,),
        )
        for entry_id, nbytes in rows:
            if total <= self._byte_limit:
                break
            victims.append(entry_id)
            total -= nbytes
        return victims

    def _delete_rows(self, ids: Sequence[int]) -> None:
        self._db.executemany("DELETE FROM qa_entries WHERE id = ?", [(i,) for i in ids])

    # -- writing -------------------------------------------------------------------------

    def add(
        self,
        question: str,
        answer: str | None,
        *,
        scope: str | None = None,
        sources: Sequence[str] = (),
        origin: Origin = "user",
        embedding: np.ndarray | None = None,
    ) -> QAEntry:
        """Store an answered (or, with ``answer=None``, prefill-only) question.

        An identical question (case and whitespace aside) in the same scope is replaced:
        same id, hit count and vector; new wording, answer, sources and origin; not stale.
        Other entries are evicted (LFU) if the byte limit is exceeded.

        :param sources: ids of the chunks the answer was generated from.
        :param embedding: the question's embedding, if the caller has it already.
        """
        question = _check_question(question)
        answer = _check_answer(answer, optional=True)
        scope = _check_scope(scope)
        source_ids = _check_ids(sources, "sources")
        if origin not in _ORIGINS:
            raise ValueError(f"origin must be one of {_ORIGINS}, got {origin!r}")
        key = _qkey(question)
        # Embed outside the lock (tens of ms); an identical question needs no vector.
        vector = None if (scope, key) in self._keys else self._vector(question, embedding)
        with self._lock:
            self._check_open()
            existing = self._keys.get((scope, key))
            if existing is None and vector is None:  # deleted since the check above
                vector = self._vector(question, embedding)
            slot = _Slot(
                scope, key, question_terms(question), source_ids, False, answer is not None
            )
            return self._fetch(self._write(existing, slot, question, answer, origin, vector))

    def correct(self, entry_id: int, answer: str) -> QAEntry:
        """Replace an entry's answer by a user's correction (origin ``"corrected"``, not
        stale). Raises KeyError for an unknown id."""
        answer = _check_answer(answer, optional=False)  # type: ignore[assignment]
        with self._lock:
            self._check_open()
            old = self._slots.get(entry_id)
            if old is None:
                raise KeyError(f"no QA bank entry {entry_id}")
            question = self._fetch(entry_id).question
            slot = _Slot(old.scope, old.key, old.terms, old.sources, False, True)
            return self._fetch(self._write(entry_id, slot, question, answer, "corrected", None))

    def _write(
        self,
        existing: int | None,
        slot: _Slot,
        question: str,
        answer: str | None,
        origin: str,
        vector: np.ndarray | None,
    ) -> int:
        """Update entry ``existing`` or insert a new one (``vector`` given), evicting what no
        longer fits, in one transaction; memory follows the commit. Returns the entry id."""
        dim = self._dim if vector is None else vector.size
        assert dim is not None
        sources = json.dumps(list(slot.sources))
        slot.nbytes = self._entry_bytes(question, answer, sources, dim)
        self._fits(slot.nbytes)
        now = time.time()
        old_bytes = 0 if existing is None else self._slots[existing].nbytes
        with self._tx():
            if existing is not None:
                self._db.execute(
                    "UPDATE qa_entries SET question = ?, answer = ?, sources = ?, stale = 0, "
                    "origin = ?, nbytes = ?, last_access = ? WHERE id = ?",
                    (question, answer, sources, origin, slot.nbytes, now, existing),
                )
                entry_id = existing
            else:
                assert vector is not None
                if self._dim is None:
                    self._db.execute(
                        "INSERT OR REPLACE INTO qa_meta VALUES ('embedder', ?), ('dim', ?)",
                        (self._embedder.name, str(dim)),
                    )
                # Upsert: another process (or handle) may have stored this question meanwhile.
                cursor = self._db.execute(
                    "INSERT INTO qa_entries (question, qkey, answer, scope, scope_key, sources, "
                    "created, last_access, origin, nbytes, vector) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (scope_key, qkey) DO "
                    "UPDATE SET question = excluded.question, answer = excluded.answer, "
                    "sources = excluded.sources, stale = 0, origin = excluded.origin, "
                    "nbytes = excluded.nbytes, last_access = excluded.last_access RETURNING id",
                    (question, slot.key, answer, slot.scope, json.dumps(slot.scope), sources)
                    + (now, now, origin, slot.nbytes, vector.tobytes()),
                )
                entry_id = int(cursor.fetchone()[0])
            victims = self._victims(self._total - old_bytes + slot.nbytes, entry_id)
            self._delete_rows(victims)
        if existing is not None:
            self._slots[existing] = slot  # same scope and key: index entries stay valid
            self._total += slot.nbytes - old_bytes
        else:
            assert vector is not None
            self._dim = dim
            if entry_id in self._slots:  # upserted onto a row this instance already knew
                self._forget(entry_id)
            self._remember(entry_id, slot, vector)
        self._drop(victims)
        return entry_id

    def _drop(self, victims: Sequence[int]) -> None:
        for victim in victims:
            self._forget(victim)
        self._counters["evictions"] += len(victims)

    def delete(self, entry_id: int) -> bool:
        """Remove an entry; False if there was none with this id."""
        with self._lock:
            self._check_open()
            if entry_id not in self._slots:
                return False
            with self._tx():
                self._delete_rows([entry_id])
            self._forget(entry_id)
            return True

    def mark_stale_for(
        self,
        new_chunk_ids: Iterable[str],
        retrieve: Callable[[str, str | None], Sequence[str]],
    ) -> list[int]:
        """Mark stale every fresh entry whose question now retrieves one of the new chunks.

        ``retrieve(question, scope)`` must return the chunk ids of the question's top-k as
        the knowledge bank retrieves them now (new chunks included). It is called once per
        fresh entry, outside the bank's lock. Returns the ids marked stale.
        """
        new = set(_check_ids(new_chunk_ids, "new_chunk_ids"))
        if not new:
            return []
        with self._lock:
            self._check_open()
            fresh = self._db.execute(
                "SELECT id, question, scope FROM qa_entries WHERE stale = 0 ORDER BY id"
            ).fetchall()
        hit = [entry_id for entry_id, q, scope in fresh if new.intersection(retrieve(q, scope))]
        with self._lock:
            self._check_open()
            hit = [i for i in hit if i in self._slots]
            with self._tx():
                self._db.executemany(
                    "UPDATE qa_entries SET stale = 1 WHERE id = ?", [(i,) for i in hit]
                )
            for entry_id in hit:
                self._slots[entry_id].stale = True
        return hit

    def mark_stale(self, entry_ids: Iterable[int]) -> list[int]:
        """Mark entries stale (not served until corrected or regenerated), e.g. when a user's
        correction or a regenerated answer contradicts them. Returns the ids marked."""
        with self._lock:
            self._check_open()
            hit = [i for i in dict.fromkeys(entry_ids) if i in self._slots]
            with self._tx():
                self._db.executemany("UPDATE qa_entries SET stale = 1 WHERE id = ?", [(i,) for i in hit])
            for entry_id in hit:
                self._slots[entry_id].stale = True
            return hit

    def similar(self, question: str, *, tau: float, scope: str | None = None,
                embedding: np.ndarray | None = None, k: int = 20) -> list[QAMatch]:
        """Stored questions of ``scope`` at least ``tau`` similar to ``question`` (paraphrases),
        most similar first; no guard is applied and no hit counted."""
        question = _check_question(question)
        tau = check_tau(tau)
        scope = _check_scope(scope)
        if not self._slots:
            return []
        vector = self._vector(question, embedding)
        with self._lock:
            self._check_open()
            part = self._parts.get(scope)
            found = part.search(vector, k) if part is not None else []
            return [QAMatch(self._fetch(i), sim, {}) for i, sim in found if sim >= tau]

    def set_byte_limit(self, byte_limit: int | None) -> int:
        """Change the byte limit (``None``: unlimited); returns how many entries were evicted."""
        limit = _check_limit(byte_limit)
        with self._lock:
            self._check_open()
            self._byte_limit = limit
            with self._tx():
                victims = self._victims(self._total, None)
                self._delete_rows(victims)
            self._drop(victims)
            return len(victims)

    # -- reading -------------------------------------------------------------------------

    def lookup(
        self,
        question: str,
        *,
        tau: float,
        scope: str | None = None,
        retrieved: Sequence[str] | None = None,
        min_overlap: float = DEFAULT_MIN_OVERLAP,
        key_terms: bool = True,
        embedding: np.ndarray | None = None,
        k: int = 5,
    ) -> LookupResult:
        """Serve the most similar stored answer of ``scope`` that passes every guard.

        The ``k`` nearest questions of the scope are judged in order of similarity (see
        :mod:`percache_plugin.rag.guards`); the first that passes is served and its hit
        count and last access are updated.

        :param retrieved: chunk ids retrieved for ``question``; turns on the consistency
            guard (``None``: off).
        :param min_overlap: least share of an entry's sources that must be in ``retrieved``.
        :param key_terms: the key-terms guard (names, acronyms, numbers must agree).
        """
        question = _check_question(question)
        tau = check_tau(tau)
        scope = _check_scope(scope)
        min_overlap = check_min_overlap(min_overlap)
        got = None if retrieved is None else frozenset(_check_ids(retrieved, "retrieved"))
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        if not self._slots:
            with self._lock:
                self._check_open()
                self._counters["lookups"] += 1
                self._counters["misses"] += 1
            return LookupResult(None, None, None)
        vector = self._vector(question, embedding)
        terms = question_terms(question) if key_terms else None
        with self._lock:
            self._check_open()
            part = self._parts.get(scope)
            candidates = part.search(vector, k) if part is not None else []
            judged: list[tuple[int, float, Verdict]] = []
            served: tuple[int, float, Verdict] | None = None
            for entry_id, sim in candidates:
                slot = self._slots[entry_id]
                agree = None if terms is None else terms_agree(terms, slot.terms)
                verdict = judge(
                    sim,
                    tau=tau,
                    stale=slot.stale,
                    answered=slot.answered,
                    sources=slot.sources,
                    retrieved=got,
                    min_overlap=min_overlap,
                    terms=agree,
                )
                judged.append((entry_id, sim, verdict))
                if verdict.rejected_by is None:
                    served = judged[-1]
                    break
                if sim < tau:
                    break
            first = judged[0] if judged else None
            self._counters["lookups"] += 1
            if served is not None:
                entry_id, sim, verdict = served
                try:  # best-effort: a full disk or read-only store still serves answers
                    with self._tx():
                        self._db.execute(
                            "UPDATE qa_entries SET hits = hits + 1, last_access = ? WHERE id = ?",
                            (time.time(), entry_id),
                        )
                except sqlite3.Error as exc:
                    self._counters["write_errors"] += 1
                    log.warning("percache QA bank: counting a hit failed (%s)", exc)
                self._counters["hits"] += 1
                match = QAMatch(self._fetch(entry_id), sim, verdict.guards)
                best = match if len(judged) == 1 else self._match(first)
                return LookupResult(match, best, None)
            # Never "scope": that would tell the caller what another scope holds.
            reason = first[2].rejected_by if first is not None else None
            self._counters["misses"] += 1
            if reason is not None:
                self._counters[f"rejected_{reason}"] += 1
            return LookupResult(None, self._match(first), reason)

    def _match(self, candidate: tuple[int, float, Verdict] | None) -> QAMatch | None:
        if candidate is None:
            return None
        entry_id, sim, verdict = candidate
        return QAMatch(self._fetch(entry_id), sim, verdict.guards)

    def get(self, entry_id: int) -> QAEntry | None:
        with self._lock:
            self._check_open()
            return self._fetch(entry_id) if entry_id in self._slots else None

    def entries(
        self,
        *,
        scope: str | None | _AllScopes = ALL_SCOPES,
        stale: bool | None = None,
        answered: bool | None = None,
    ) -> list[QAEntry]:
        """Entries in id order, optionally filtered by scope (``ALL_SCOPES``: any; ``None``:
        unscoped only), staleness and whether they have an answer."""
        where: list[str] = ["1"]
        params: list[object] = []
        if not isinstance(scope, _AllScopes):
            where.append("scope_key = ?")
            params.append(json.dumps(_check_scope(scope)))
        if stale is not None:
            where.append("stale = ?")
            params.append(int(bool(stale)))
        if answered is not None:
            where.append("answer IS NOT NULL" if answered else "answer IS NULL")
        with self._lock:
            self._check_open()
            rows = self._db.execute(
                f"SELECT {_COLS} FROM qa_entries WHERE {' AND '.join(where)} ORDER BY id", params
            ).fetchall()
        return [_entry(row) for row in rows]

    def total_bytes(self) -> int:
        return self._total

    @property
    def byte_limit(self) -> int | None:
        return self._byte_limit

    def __len__(self) -> int:
        return len(self._slots)

    def stats(self) -> dict[str, object]:
        """Sizes and this session's counters (lookups, hits, misses, rejections, evictions)."""
        with self._lock:
            slots = list(self._slots.values())
            return {
                "entries": len(slots),
                "answered": sum(s.answered for s in slots),
                "stale": sum(s.stale for s in slots),
                "scopes": len(self._parts),
                "bytes": self._total,
                "byte_limit": self._byte_limit,
                "embedder": getattr(self._embedder, "name", None),
                "lookups": self._counters["lookups"],
                "hits": self._counters["hits"],
                "misses": self._counters["misses"],
                "rejected": {r: self._counters[f"rejected_{r}"] for r in REASONS},
                "evictions": self._counters["evictions"],
            }

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def __enter__(self) -> QABank:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _entry(row: tuple[object, ...]) -> QAEntry:
    entry_id, question, answer, scope, sources, stale, hits, created, last, origin, nbytes = row
    return QAEntry(
        id=int(entry_id),  # type: ignore[call-overload]
        question=str(question),
        answer=None if answer is None else str(answer),
        scope=None if scope is None else str(scope),
        sources=tuple(json.loads(str(sources))),
        stale=bool(stale),
        hits=int(hits),  # type: ignore[call-overload]
        created=float(created),  # type: ignore[arg-type]
        last_access=float(last),  # type: ignore[arg-type]
        origin=str(origin),
        nbytes=int(nbytes),  # type: ignore[call-overload]
    )
