"""Work deferred to idle time, kept in SQLite so a crash loses none of it."""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["IdleTask", "IdleQueue", "IdleReport", "TaskKind"]

TaskKind = Literal["answer", "refresh"]
_SCHEMA = """
CREATE TABLE IF NOT EXISTS idle_tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, question TEXT NOT NULL,
    scope TEXT, created REAL NOT NULL, UNIQUE (kind, question, scope));
"""


@dataclass(frozen=True)
class IdleTask:
    """One deferred job.

    :ivar kind: ``answer`` (compute the real answer of a question served from the QA bank) or
        ``refresh`` (regenerate a stale QA entry after new documents).
    """

    id: int
    kind: TaskKind
    question: str
    scope: str | None
    created: float


@dataclass
class IdleReport:
    """What one :meth:`PerCache.idle` call did."""

    tasks_run: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    seconds: float = 0.0
    remaining: int = 0


class IdleQueue:
    """FIFO of :class:`IdleTask`; the same (kind, question, scope) is queued once.

    :param db_path: the store's SQLite file, or None for memory.
    """

    def __init__(self, db_path: Path | None) -> None:
        self._lock = threading.RLock()
        self._db = sqlite3.connect(":memory:" if db_path is None else str(db_path),
                                   check_same_thread=False, isolation_level=None, timeout=10)
        self._db.executescript(_SCHEMA)

    def push(self, kind: TaskKind, question: str, scope: str | None) -> bool:
        """Queue a task; False if the same one is already queued."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO idle_tasks (kind, question, scope, created) VALUES (?, ?, ?, ?)",
                (kind, question, scope, time.time()))
            return cur.rowcount == 1

    def peek(self) -> IdleTask | None:
        """The oldest task (it stays queued until :meth:`done`, so a crash mid-task retries it)."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, kind, question, scope, created FROM idle_tasks ORDER BY id LIMIT 1"
            ).fetchone()
            return None if row is None else IdleTask(*row)

    def done(self, task: IdleTask) -> None:
        with self._lock:
            self._db.execute("DELETE FROM idle_tasks WHERE id = ?", (task.id,))

    def pending(self) -> list[IdleTask]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, kind, question, scope, created FROM idle_tasks ORDER BY id").fetchall()
            return [IdleTask(*r) for r in rows]

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM idle_tasks").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
