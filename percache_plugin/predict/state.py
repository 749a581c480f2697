"""Persistent state of the prediction layer: per-scope abstract, pending chunks, history."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..sqlite_tx import Schema, connect

__all__ = ["PredictionState"]

_SCHEMA = Schema("predict", 1, """
CREATE TABLE IF NOT EXISTS predict_abstract (scope TEXT PRIMARY KEY, text TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS predict_pending (scope TEXT, chunk_id TEXT NOT NULL, added REAL NOT NULL,
    PRIMARY KEY (scope, chunk_id));
CREATE TABLE IF NOT EXISTS predict_history (id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT,
    question TEXT NOT NULL, asked REAL NOT NULL);
""")
_NULL = "\x00none"  # SQLite primary keys treat NULLs as distinct; store the None scope as a marker


def _s(scope: str | None) -> str:
    return _NULL if scope is None else scope


class PredictionState:
    """:param db_path: the store's SQLite file, or None for memory."""

    def __init__(self, db_path: Path | None, *, history_size: int = 20) -> None:
        self._lock = threading.RLock()
        self.history_size = history_size
        self._db = connect(db_path, _SCHEMA)

    # abstract -------------------------------------------------------------------------------
    def abstract(self, scope: str | None) -> str:
        with self._lock:
            row = self._db.execute("SELECT text FROM predict_abstract WHERE scope = ?", (_s(scope),)).fetchone()
            return "" if row is None else str(row[0])

    def set_abstract(self, scope: str | None, text: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO predict_abstract VALUES (?, ?, ?)",
                             (_s(scope), text, time.time()))

    # chunks waiting for the abstract ------------------------------------------------------------
    def add_pending(self, scope: str | None, chunk_ids: Sequence[str]) -> None:
        with self._lock:
            now = time.time()
            self._db.executemany("INSERT OR IGNORE INTO predict_pending VALUES (?, ?, ?)",
                                 [(_s(scope), c, now) for c in chunk_ids])

    def pending(self, scope: str | None) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT chunk_id FROM predict_pending WHERE scope = ? ORDER BY added, rowid",
                                    (_s(scope),)).fetchall()
            return [r[0] for r in rows]

    def clear_pending(self, scope: str | None, chunk_ids: Sequence[str]) -> None:
        with self._lock:
            self._db.executemany("DELETE FROM predict_pending WHERE scope = ? AND chunk_id = ?",
                                 [(_s(scope), c) for c in chunk_ids])

    # question history -----------------------------------------------------------------------
    def remember(self, scope: str | None, question: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO predict_history (scope, question, asked) VALUES (?, ?, ?)",
                             (_s(scope), question, time.time()))
            self._db.execute(
                "DELETE FROM predict_history WHERE scope = ? AND id NOT IN (SELECT id FROM predict_history"
                " WHERE scope = ? ORDER BY id DESC LIMIT ?)", (_s(scope), _s(scope), self.history_size))

    def history(self, scope: str | None) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT question FROM predict_history WHERE scope = ? ORDER BY id",
                                    (_s(scope),)).fetchall()
            return [r[0] for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
