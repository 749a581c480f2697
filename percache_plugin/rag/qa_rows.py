"""The QA bank's rows in the store's SQLite file: schema, migration, reads and writes.

One row per entry in ``qa_entries`` with its question embedding as a float32 blob, so
reopening never re-embeds. ``qa_meta`` holds the embedder name and dimension and a
``generation`` counter that every change of the entries (not a hit count) increments in
the same transaction: another bank on the same file compares it to the generation it
loaded and re-reads the rows when it moved (see :meth:`QARows.generation`).

A row that cannot be read (corrupt JSON, a vector of the wrong size) is a miss: it is
removed and counted, never raised.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from percache_plugin.rag.qa_length import pack_ids, unpack_ids
from percache_plugin.rag.qa_types import QAEntry
from percache_plugin.sqlite_tx import Database, Schema, connect

__all__ = ["ENTRY_OVERHEAD", "QARows", "RowInfo", "SCHEMA"]

log = logging.getLogger("percache")

ENTRY_OVERHEAD = 64  # bytes charged per entry for the row and index bookkeeping
SCHEMA = Schema(
    "qa",
    2,
    """
CREATE TABLE IF NOT EXISTS qa_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS qa_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT, question TEXT NOT NULL, qkey TEXT NOT NULL,
    answer TEXT, scope TEXT, scope_key TEXT NOT NULL, sources TEXT NOT NULL,
    stale INTEGER NOT NULL DEFAULT 0, hits INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL, last_access REAL NOT NULL, origin TEXT NOT NULL,
    nbytes INTEGER NOT NULL, vector BLOB NOT NULL, model TEXT NOT NULL DEFAULT '',
    tokens BLOB, ended TEXT);
""",
)
# Version-1 tables (before entries were bound to a model) get the column and the new key.
_INDEXES = """
DROP INDEX IF EXISTS qa_entries_key;
CREATE UNIQUE INDEX IF NOT EXISTS qa_entries_model_key ON qa_entries (scope_key, model, qkey);
CREATE INDEX IF NOT EXISTS qa_entries_lfu ON qa_entries (hits, last_access, id);
"""
_COLS = (
    "id, question, answer, scope, sources, stale, hits, created, last_access, origin, nbytes, "
    "model, tokens, ended"
)
_UPSERT = (
    "INSERT INTO qa_entries (question, qkey, answer, scope, scope_key, sources, created, "
    "last_access, origin, nbytes, vector, model, tokens, ended) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (scope_key, model, qkey) DO UPDATE SET question = excluded.question, "
    "answer = excluded.answer, sources = excluded.sources, stale = 0, "
    "origin = excluded.origin, nbytes = excluded.nbytes, last_access = excluded.last_access, "
    "tokens = excluded.tokens, ended = excluded.ended "
    "RETURNING id"
)


@dataclass(frozen=True)
class RowInfo:
    """What the bank keeps in memory of one row (everything but the vector and answer)."""

    id: int
    question: str
    key: str
    scope: str | None
    model: str
    sources: tuple[str, ...]
    stale: bool
    answered: bool
    nbytes: int
    length: int | None = None  # generated tokens of the answer (None: unknown)
    ended: str | None = None  # how its generation ended (qa_length.ENDINGS; None: unknown)


def _sources(text: object) -> tuple[str, ...]:
    items = json.loads(str(text))
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ValueError("sources is not a list of str")
    return tuple(items)


def _readable_sources(text: object) -> tuple[str, ...]:
    """The sources, or none when the row's are unreadable (then no retrieval matches them)."""
    try:
        return _sources(text)
    except ValueError:
        return ()


def _entry(row: tuple[object, ...]) -> QAEntry:
    (entry_id, question, answer, scope, sources, stale, hits, created, last, origin, nbytes, model,
     tokens, ended) = row
    return QAEntry(
        id=int(entry_id),  # type: ignore[call-overload]
        question=str(question),
        answer=None if answer is None else str(answer),
        scope=None if scope is None else str(scope),
        sources=_sources(sources),
        stale=bool(stale),
        hits=int(hits),  # type: ignore[call-overload]
        created=float(created),  # type: ignore[arg-type]
        last_access=float(last),  # type: ignore[arg-type]
        origin=str(origin),
        nbytes=int(nbytes),  # type: ignore[call-overload]
        model=str(model),
        tokens=unpack_ids(tokens),
        ended=None if ended is None else str(ended),
    )


class QARows(Database):
    """The ``qa_*`` tables of one database file (``None``: in memory). Not thread-safe:
    the bank serializes calls with its lock."""

    def __init__(self, path: Path | None, embedder_name: str) -> None:
        self.path = path
        self.corrupt = 0  # rows found unreadable and removed
        self._embedder = embedder_name
        self.db = connect(path, SCHEMA)
        try:
            columns = {r[1] for r in self.db.execute("PRAGMA table_info(qa_entries)")}
            with self.tx():
                if "model" not in columns:
                    self.db.execute(
                        "ALTER TABLE qa_entries ADD COLUMN model TEXT NOT NULL DEFAULT ''"
                    )
                if "tokens" not in columns:  # answers of unknown length: corrections aside,
                    for sql in ("ALTER TABLE qa_entries ADD COLUMN tokens BLOB",  # not served
                                "ALTER TABLE qa_entries ADD COLUMN ended TEXT",  # to a request
                                "UPDATE qa_entries SET ended = 'given' WHERE origin = 'corrected'"):
                        self.db.execute(sql)  # with a cap (qa_length)
            self.db.executescript(_INDEXES)
            with self.tx():
                self.dim = self._check_meta()
        except BaseException:
            self.db.close()
            raise

    # -- meta ----------------------------------------------------------------------------

    def _meta(self, name: str) -> str | None:
        row = self.db.execute("SELECT value FROM qa_meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def _check_meta(self) -> int | None:
        stored, dim = self._meta("embedder"), self._meta("dim")
        if stored is None or dim is None:
            return None
        if self.db.execute("SELECT 1 FROM qa_entries LIMIT 1").fetchone() is None:
            self.db.execute("DELETE FROM qa_meta WHERE name IN ('embedder', 'dim')")
            return None
        if stored != self._embedder:
            raise ValueError(
                f"QA bank {self.path} holds question vectors of embedder {stored!r}; open it "
                f"with that embedder, not {self._embedder!r} (or delete its qa_ tables)"
            )
        return int(dim)

    def set_dim(self, dim: int) -> None:
        """Record the embedder and dimension (inside a transaction, with the first row)."""
        self.db.execute(
            "INSERT OR REPLACE INTO qa_meta VALUES ('embedder', ?), ('dim', ?)",
            (self._embedder, str(dim)),
        )
        self.dim = dim

    def generation(self) -> int:
        """The change counter (0 for a bank never written)."""
        value = self._meta("generation")
        return 0 if value is None else int(value)

    def bump(self) -> None:
        """Count a change of the entries (inside the change's transaction)."""
        self.db.execute(
            "INSERT INTO qa_meta VALUES ('generation', '1') ON CONFLICT (name) DO UPDATE "
            "SET value = CAST(value AS INTEGER) + 1"
        )

    # -- reading -------------------------------------------------------------------------

    def infos(self, known: dict[int, RowInfo]) -> Iterator[tuple[RowInfo, np.ndarray | None]]:
        """Every readable row in id order, with its vector unless ``known`` holds the same
        question already; unreadable rows are removed (and counted in ``corrupt``)."""
        if self.dim is None:  # another bank may have stored the first entry
            dim = self._meta("dim")
            self.dim = None if dim is None else int(dim)
        rows = self.db.execute(
            "SELECT id, question, qkey, answer IS NOT NULL, scope, sources, stale, nbytes, "
            "model, length(tokens) / 4, ended FROM qa_entries ORDER BY id"
        ).fetchall()
        bad: list[int] = []
        for entry_id, question, key, answered, scope, sources, stale, nbytes, model, length, ended in rows:
            try:
                info = RowInfo(int(entry_id), str(question), str(key), scope, str(model),
                               _sources(sources), bool(stale), bool(answered), int(nbytes),
                               None if length is None else int(length), ended)
                old = known.get(info.id)
                vector = None
                if old is None or (old.scope, old.model, old.key) != (info.scope, info.model,
                                                                      info.key):
                    vector = self.vector(info.id)
            except LookupError:  # deleted by another bank since the rows were read: gone
                continue
            except (ValueError, TypeError) as exc:
                log.warning("percache QA bank: entry %s is unreadable (%s); removed", entry_id,
                            exc)
                bad.append(int(entry_id))
                continue
            yield info, vector
        self.remove_corrupt(bad)

    def vector(self, entry_id: int) -> np.ndarray:
        """The entry's question vector; LookupError when the row is gone (ValueError: unreadable)."""
        row = self.db.execute("SELECT vector FROM qa_entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise LookupError(f"no QA entry {entry_id}")
        (blob,) = row
        vector = np.frombuffer(blob, dtype=np.float32)
        if self.dim is None or vector.size != self.dim:
            raise ValueError(f"a {vector.size}-float vector, expected {self.dim}")
        return vector

    def fetch(self, entry_id: int) -> QAEntry | None:
        """The entry, or ``None`` if there is none or its row is unreadable (then removed)."""
        row = self.db.execute(f"SELECT {_COLS} FROM qa_entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            return None
        try:
            return _entry(row)
        except (ValueError, TypeError) as exc:
            log.warning("percache QA bank: entry %s is unreadable (%s); removed", entry_id, exc)
            self.remove_corrupt([entry_id])
            return None

    def select(self, where: str, params: Sequence[object]) -> list[QAEntry]:
        rows = self.db.execute(
            f"SELECT {_COLS} FROM qa_entries WHERE {where} ORDER BY id", params
        ).fetchall()
        out = []
        for row in rows:
            entry = self.fetch(int(row[0])) if not _readable(row) else _entry(row)
            if entry is not None:
                out.append(entry)
        return out

    def fresh(self) -> list[tuple[int, str, str | None, str, bytes, tuple[str, ...]]]:
        """The entries served: id, question, scope, model, question vector, sources."""
        rows = self.db.execute(
            "SELECT id, question, scope, model, vector, sources FROM qa_entries WHERE stale = 0 ORDER BY id"
        ).fetchall()
        return [(*row[:5], _readable_sources(row[5])) for row in rows]

    def victims(self, total: int, limit: int | None, protect: int | None) -> list[int]:
        """LFU order: fewest hits, then least recently served, then oldest; a user's
        correction goes only after every other entry (evicted, the model's answer it replaced
        would be generated and served again)."""
        if limit is None or total <= limit:
            return []
        victims: list[int] = []
        rows = self.db.execute(
            "SELECT id, nbytes FROM qa_entries WHERE id IS NOT ?"
            " ORDER BY origin = 'corrected', hits, last_access, id",
            (protect,),
        )
        for entry_id, nbytes in rows:
            if total <= limit:
                break
            victims.append(entry_id)
            total -= nbytes
        return victims

    # -- writing (inside tx() unless said otherwise) -------------------------------------

    def upsert(self, info: RowInfo, answer: str | None, origin: str, vector: np.ndarray,
               tokens: Sequence[int] | None = None) -> int:
        now = time.time()
        cursor = self.db.execute(
            _UPSERT,
            (info.question, info.key, answer, info.scope, json.dumps(info.scope),
             json.dumps(list(info.sources)), now, now, origin, info.nbytes, vector.tobytes(),
             info.model, pack_ids(tokens), info.ended),
        )
        self.bump()
        return int(cursor.fetchone()[0])

    def update(self, entry_id: int, info: RowInfo, answer: str | None, origin: str,
               tokens: Sequence[int] | None = None) -> None:
        self.db.execute(
            "UPDATE qa_entries SET question = ?, answer = ?, sources = ?, stale = 0, "
            "origin = ?, nbytes = ?, last_access = ?, tokens = ?, ended = ? WHERE id = ?",
            (info.question, answer, json.dumps(list(info.sources)), origin, info.nbytes,
             time.time(), pack_ids(tokens), info.ended, entry_id),
        )
        self.bump()

    def delete(self, ids: Sequence[int]) -> None:
        if ids:
            self.db.executemany("DELETE FROM qa_entries WHERE id = ?", [(i,) for i in ids])
            self.bump()

    def mark_stale(self, ids: Sequence[int]) -> None:
        if ids:
            self.db.executemany("UPDATE qa_entries SET stale = 1 WHERE id = ?", [(i,) for i in ids])
            self.bump()

    def count_hit(self, entry_id: int) -> None:
        """Its own transaction; does not move the generation."""
        with self.tx():
            self.db.execute(
                "UPDATE qa_entries SET hits = hits + 1, last_access = ? WHERE id = ?",
                (time.time(), entry_id),
            )

    def remove_corrupt(self, ids: Sequence[int]) -> None:
        """Best-effort removal of unreadable rows (own transaction)."""
        if not ids:
            return
        self.corrupt += len(ids)
        if self.db.in_transaction:
            self.delete(ids)
            return
        try:
            with self.tx():
                self.delete(ids)
        except sqlite3.Error as exc:
            log.warning("percache QA bank: removing unreadable entries failed (%s)", exc)


def _readable(row: tuple[object, ...]) -> bool:
    try:
        _sources(row[4])
        unpack_ids(row[12])
    except (ValueError, TypeError):
        return False
    return True
