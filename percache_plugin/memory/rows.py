"""Fact rows in the store's SQLite (``percache.sqlite3``): the facts, their history and the
tombstones of forgotten ones.

A fact is ``active`` (served) or ``superseded`` (kept for :meth:`FactRows.history`, never
served). Every change bumps ``generation`` in the same transaction, so an in-memory index can
tell cheaply whether it must reconcile. :meth:`FactRows.forget` deletes the fact's row and its
history (and the vector of its retrieval key, ``mem_keys``) in one transaction and leaves only its id in ``mem_tombstones``; the connection runs
with ``secure_delete`` (see :mod:`percache_plugin.sqlite_tx`), so the deleted text is
overwritten in the database pages, and :meth:`FactRows.scrub` checkpoints the WAL so no old
frame keeps it either.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..sqlite_tx import Database, Schema, connect

__all__ = ["MEMORY_SCHEMA", "CorruptRow", "Fact", "FactRows", "HistoryEvent", "scope_key"]

MEMORY_SCHEMA = Schema("memory", 1, """
CREATE TABLE IF NOT EXISTS mem_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mem_facts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, scope TEXT,
    scope_key TEXT NOT NULL, text TEXT NOT NULL, norm TEXT NOT NULL, subject TEXT,
    metadata TEXT NOT NULL, vector BLOB NOT NULL, created REAL NOT NULL, updated REAL NOT NULL,
    status TEXT NOT NULL, superseded_by TEXT, kv_keys TEXT NOT NULL DEFAULT '[]');
CREATE INDEX IF NOT EXISTS mem_facts_scope ON mem_facts (scope_key, status);
CREATE TABLE IF NOT EXISTS mem_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, fact_id TEXT NOT NULL, event TEXT NOT NULL,
    text TEXT NOT NULL, metadata TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS mem_history_fact ON mem_history (fact_id);
CREATE TABLE IF NOT EXISTS mem_tombstones (id TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS mem_keys (id TEXT PRIMARY KEY, vector BLOB NOT NULL);
""")

log = logging.getLogger("percache")

_COLS = "id, scope, text, subject, metadata, created, updated, status, superseded_by, kv_keys"


def scope_key(scope: str | None) -> str:
    """The column value of a scope (``None``, the unscoped facts, differs from every str)."""
    return "" if scope is None else "s:" + scope


@dataclass(frozen=True)
class Fact:
    """One memory item. ``status`` is ``active`` (served) or ``superseded`` (by
    ``superseded_by``: kept in history, never served). ``kv_keys`` name its stored K/V nodes."""

    id: str
    text: str
    scope: str | None
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    created: float = 0.0
    updated: float = 0.0
    status: str = "active"
    superseded_by: str | None = None
    subject: str | None = None
    kv_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class HistoryEvent:
    """One change of a fact: ``added``, ``updated`` (``text`` is the version replaced),
    ``superseded`` (``text`` is the superseding fact's id) or ``readded`` (the same fact
    was added again; nothing changed)."""

    fact_id: str
    event: str
    text: str
    metadata: Mapping[str, str]
    at: float


def _json(text: str) -> object:
    """``text`` parsed (None: not JSON; a corrupt history row is skipped)."""
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return None


class CorruptRow(ValueError):
    """A memory row that cannot be read (metadata or K/V keys not the JSON written, a vector
    of another size than the embedder's): it is skipped, like a fact not stored."""


def _fact(row: tuple) -> Fact:
    fid, scope, text, subject, metadata, created, updated, status, by, kv = row
    try:
        meta, keys = json.loads(metadata), json.loads(kv)
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise TypeError(f"metadata {metadata!r} is not a JSON object of str")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise TypeError(f"kv_keys {kv!r} is not a JSON list of str")
        return Fact(fid, str(text), scope, meta, float(created), float(updated), status, by, subject, tuple(keys))
    except (ValueError, TypeError) as exc:
        raise CorruptRow(f"memory row {fid!r} is unreadable: {exc}") from exc


def _loose(row: tuple) -> Fact:
    """A row as a fact even when it is corrupt (what forgetting it needs: id and text)."""
    try:
        return _fact(row)
    except CorruptRow:
        return Fact(row[0], str(row[2]), row[1])


class FactRows(Database):
    """The memory tables of one database (``path`` None: in memory), bound to one embedder."""

    def __init__(self, path: Path | None, embedder_name: str, dim: int) -> None:
        self.dim = dim
        self.corrupt: set[str] = set()  # ids of the rows skipped as unreadable (CorruptRow)
        self.db = connect(path, MEMORY_SCHEMA)
        try:
            with self.tx():
                row = self.db.execute("SELECT value FROM mem_meta WHERE name = 'embedder'").fetchone()
                if row is None or self.count() == 0:
                    self.db.execute("INSERT OR REPLACE INTO mem_meta VALUES ('embedder', ?), "
                                    "('dim', ?)", (embedder_name, str(dim)))
                elif row[0] != embedder_name:
                    raise ValueError(f"the memory in {path} was built with embedder {row[0]!r}, "
                                     f"not {embedder_name!r}; use the same embedder or a new store")
                self.db.execute("INSERT OR IGNORE INTO mem_meta VALUES ('generation', '0')")
        except BaseException:
            self.db.close()
            raise

    # -- reading ---------------------------------------------------------------------------
    @staticmethod
    def stored_embedder(path: Path) -> tuple[str, int] | None:
        """The embedder name and dimension a store's memory was built with (None: no memory)."""
        db = connect(path, MEMORY_SCHEMA)
        try:
            meta = dict(db.execute("SELECT name, value FROM mem_meta WHERE name IN ('embedder', 'dim')"))
        finally:
            db.close()
        return (meta["embedder"], int(meta["dim"])) if len(meta) == 2 else None

    def generation(self) -> int:
        row = self.db.execute("SELECT value FROM mem_meta WHERE name = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM mem_facts").fetchone()[0])

    def _readable(self, rows: Iterable[tuple]) -> list[Fact]:
        """The facts of ``rows``, less the corrupt ones (recorded in :attr:`corrupt`, logged once)."""
        out = []
        for row in rows:
            try:
                out.append(_fact(row))
            except CorruptRow as exc:
                self._skip(row[0], exc)
        return out

    def _skip(self, fact_id: str, exc: Exception) -> None:
        if fact_id not in self.corrupt:
            self.corrupt.add(fact_id)
            log.warning("percache: %s; it is skipped (pc.memory.forget(%r) removes it)", exc, fact_id)

    def get(self, fact_id: str, *, loose: bool = False) -> Fact | None:
        """The fact of this id (None: none, or its row is corrupt; ``loose``: a corrupt row
        as a fact with its id, scope and text only, for forgetting it)."""
        row = self.db.execute(f"SELECT {_COLS} FROM mem_facts WHERE id = ?", (fact_id,)).fetchone()
        if row is None:
            return None
        return _loose(row) if loose else next(iter(self._readable([row])), None)

    def select(self, scope: str | None, *, status: str | None = "active") -> list[Fact]:
        """Facts of one scope in the order added (``status`` None: every status)."""
        sql = f"SELECT {_COLS} FROM mem_facts WHERE scope_key = ?"
        params: list[object] = [scope_key(scope)]
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        return self._readable(self.db.execute(sql + " ORDER BY seq", params))

    def active_vectors(self) -> dict[str, tuple[Fact, np.ndarray, np.ndarray | None]]:
        """Every active fact of every scope with its text's vector and its key's (None: the
        fact has no retrieval context), for the in-memory index."""
        out = {}
        cols = ", ".join(f"f.{c.strip()}" for c in _COLS.split(","))
        for row in self.db.execute(f"SELECT {cols}, f.vector, k.vector FROM mem_facts f "
                                   "LEFT JOIN mem_keys k ON k.id = f.id WHERE f.status = 'active'"):
            try:
                fact = _fact(row[:-2])
                vector = self._vector(row[0], row[-2])
                key = None if row[-1] is None else self._vector(row[0], row[-1])
            except CorruptRow as exc:
                self._skip(row[0], exc)
                continue
            out[row[0]] = (fact, vector, key)
        return out

    def _vector(self, fact_id: str, blob: object) -> np.ndarray:
        if not isinstance(blob, bytes) or len(blob) != 4 * self.dim:
            size = len(blob) if isinstance(blob, bytes) else type(blob).__name__
            raise CorruptRow(f"memory row {fact_id!r} has a vector of {size} bytes, not {4 * self.dim}")
        return np.frombuffer(blob, dtype=np.float32).copy()

    def with_norm(self, scope: str | None, norm: str) -> Fact | None:
        row = self.db.execute(f"SELECT {_COLS} FROM mem_facts WHERE scope_key = ? AND norm = ? "
                              "AND status = 'active' ORDER BY seq LIMIT 1",
                              (scope_key(scope), norm)).fetchone()
        return next(iter(self._readable([] if row is None else [row])), None)

    def with_subject(self, scope: str | None, subject: str) -> list[Fact]:
        rows = self.db.execute(f"SELECT {_COLS} FROM mem_facts WHERE scope_key = ? AND subject = ? "
                               "AND status = 'active' ORDER BY seq", (scope_key(scope), subject))
        return self._readable(rows)

    def history(self, fact_id: str) -> list[HistoryEvent]:
        rows = self.db.execute("SELECT fact_id, event, text, metadata, at FROM mem_history "
                               "WHERE fact_id = ? ORDER BY seq", (fact_id,))
        return [HistoryEvent(f, e, t, meta, float(a)) for f, e, t, m, a in rows
                if isinstance(meta := _json(m), dict)]

    def tombstoned(self, fact_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM mem_tombstones WHERE id = ?",
                               (fact_id,)).fetchone() is not None

    def scopes(self) -> list[str | None]:
        rows = self.db.execute("SELECT DISTINCT scope_key, scope FROM mem_facts ORDER BY scope_key")
        return [scope for _, scope in rows]

    # -- writing (the caller holds a transaction: ``with rows.tx():``) ---------------------
    def bump(self) -> None:
        self.db.execute("UPDATE mem_meta SET value = CAST(value AS INTEGER) + 1 "
                        "WHERE name = 'generation'")

    def insert(self, fact: Fact, norm: str, vector: np.ndarray, key: np.ndarray | None = None) -> None:
        """Store a new fact: ``vector`` embeds its text (near-duplicates), ``key`` its text
        with its retrieval context (what search ranks; None: the text's vector)."""
        self.db.execute(
            "INSERT INTO mem_facts (id, scope, scope_key, text, norm, subject, metadata, vector, "
            "created, updated, status, superseded_by, kv_keys) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (fact.id, fact.scope, scope_key(fact.scope), fact.text, norm, fact.subject,
             json.dumps(dict(fact.metadata)), np.asarray(vector, np.float32).tobytes(),
             fact.created, fact.updated, fact.status, fact.superseded_by, json.dumps(list(fact.kv_keys))))
        self.set_key(fact.id, key)
        self.log(fact.id, "added", fact.text, fact.metadata)
        self.bump()

    def replace_text(self, fact: Fact, text: str, norm: str, metadata: Mapping[str, str],
                     subject: str | None, vector: np.ndarray, key: np.ndarray | None = None) -> None:
        """Record ``fact``'s current version in its history, then store the new one."""
        self.log(fact.id, "updated", fact.text, fact.metadata)
        self.db.execute("UPDATE mem_facts SET text = ?, norm = ?, metadata = ?, subject = ?, "
                        "vector = ?, updated = ?, kv_keys = '[]' WHERE id = ?",
                        (text, norm, json.dumps(dict(metadata)), subject,
                         np.asarray(vector, np.float32).tobytes(), time.time(), fact.id))
        self.set_key(fact.id, key)
        self.bump()

    def set_key(self, fact_id: str, key: np.ndarray | None) -> None:
        """Store (or, with None, remove) the vector of a fact's text with its context."""
        self.db.execute("DELETE FROM mem_keys WHERE id = ?", (fact_id,))
        if key is not None:
            self.db.execute("INSERT INTO mem_keys VALUES (?, ?)",
                            (fact_id, np.asarray(key, np.float32).tobytes()))

    def supersede(self, old_ids: Sequence[str], new_id: str) -> None:
        for old in old_ids:
            self.db.execute("UPDATE mem_facts SET status = 'superseded', superseded_by = ?, "
                            "updated = ? WHERE id = ?", (new_id, time.time(), old))
            self.log(old, "superseded", new_id, {})
        if old_ids:
            self.bump()

    def set_kv_keys(self, fact_id: str, keys: Sequence[str]) -> None:
        self.db.execute("UPDATE mem_facts SET kv_keys = ? WHERE id = ?", (json.dumps(list(keys)), fact_id))

    def log(self, fact_id: str, event: str, text: str, metadata: Mapping[str, str]) -> None:
        self.db.execute("INSERT INTO mem_history (fact_id, event, text, metadata, at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (fact_id, event, text, json.dumps(dict(metadata)), time.time()))

    def forget(self, fact_id: str) -> None:
        """Delete the fact and its history; keep its id as a tombstone. Facts it superseded
        stay superseded (never served again)."""
        self.db.execute("DELETE FROM mem_facts WHERE id = ?", (fact_id,))
        self.db.execute("DELETE FROM mem_history WHERE fact_id = ?", (fact_id,))
        self.db.execute("DELETE FROM mem_keys WHERE id = ?", (fact_id,))
        self.db.execute("INSERT OR REPLACE INTO mem_tombstones VALUES (?, ?)", (fact_id, time.time()))
        self.bump()

    def drop_events(self, event: str, dropped: Callable[[Mapping[str, str]], bool]) -> int:
        """Delete the history events of kind ``event`` whose metadata ``dropped`` accepts."""
        rows = self.db.execute("SELECT seq, metadata FROM mem_history WHERE event = ?", (event,)).fetchall()
        gone = [(seq,) for seq, metadata in rows if isinstance(meta := _json(metadata), dict) and dropped(meta)]
        self.db.executemany("DELETE FROM mem_history WHERE seq = ?", gone)
        return len(gone)

    def scrub(self) -> bool:
        """Move every WAL frame into the database and truncate the WAL (deleted rows were
        already zeroed by ``secure_delete``). False when a reader elsewhere kept frames."""
        busy, _, _ = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return not busy
