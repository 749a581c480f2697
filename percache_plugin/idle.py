"""Work deferred to idle time, kept in SQLite so a crash loses none of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from .best_effort import retry_delay
from .sqlite_tx import Schema, checkpoint, connect

__all__ = ["IdleTask", "IdleQueue", "IdleReport", "TaskKind", "TASK_KINDS"]

TaskKind = Literal["answer", "refresh", "abstract", "predict_knowledge", "predict_history",
                   "populate", "decode", "reprefill", "warm", "calibrate"]
TASK_KINDS: tuple[str, ...] = get_args(TaskKind)
_SCHEMA = Schema("idle", 1, """
CREATE TABLE IF NOT EXISTS idle_tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, question TEXT NOT NULL,
    scope TEXT, created REAL NOT NULL, not_before REAL NOT NULL DEFAULT 0,
    UNIQUE (kind, question, scope));
""")
_COLS = "id, kind, question, scope, created"


@dataclass(frozen=True)
class IdleTask:
    """One deferred job.

    :ivar kind: ``answer`` (compute the real answer of a question served from the QA bank),
        ``refresh`` (regenerate a stale QA entry after new documents), ``abstract`` (summarize
        new chunks of ``scope``; question ``rebuild``: every chunk of it, after a removal), ``predict_knowledge`` / ``predict_history`` (predict
        questions; ``question`` names the round), ``populate`` (process a predicted question),
        ``decode`` (answer a prefill-only entry), ``reprefill`` (restore evicted chunk K/V),
        ``warm`` (store a new chunk's K/V), ``calibrate`` (measure the verify cost curve).
    """

    id: int
    kind: str
    question: str
    scope: str | None
    created: float


@dataclass
class IdleReport:
    """What one :meth:`PerCache.idle` call did, and what is left.

    :ivar tasks_run: tasks finished; ``by_kind`` splits them by kind.
    :ivar prefill_tokens, decode_tokens, flops: background compute spent.
    :ivar seconds: wall time of the call.
    :ivar remaining: tasks still queued; ``remaining_by_kind`` splits them by kind.
    :ivar preempted: tasks interrupted (by a foreground call or the budget); they stay queued.
    :ivar predicted: questions predicted in this call.
    :ivar stopped_by: ``"done"`` (nothing runnable left), ``"budget"``, ``"max_tasks"`` or
        ``"preempted"``.
    :ivar disputed: stored answers put out of service because a regenerated answer
        contradicted them (see :mod:`percache_plugin.disputes`).
    :ivar skipped_by_kind: tasks that left the queue without doing their work (a ``warm``
        task that found the K/V store at ``kv_warm_max_share`` of its limit, or its chunk
        gone), by kind; not counted in ``tasks_run`` or ``by_kind``.
    """

    tasks_run: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    flops: float = 0.0
    seconds: float = 0.0
    remaining: int = 0
    preempted: int = 0
    predicted: list[str] = field(default_factory=list)
    remaining_by_kind: dict[str, int] = field(default_factory=dict)
    stopped_by: str = "done"
    disputed: int = 0
    skipped_by_kind: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: what ran, what it cost, what remains."""
        ran = ", ".join(f"{n} {k}" for k, n in sorted(self.by_kind.items())) or "nothing"
        if self.skipped_by_kind:
            ran += "; skipped " + ", ".join(f"{n} {k}" for k, n in sorted(self.skipped_by_kind.items()))
        left = ", ".join(f"{n} {k}" for k, n in sorted(self.remaining_by_kind.items())) or "nothing"
        return (f"{self.tasks_run} tasks in {self.seconds:.1f} s ({ran}); {self.prefill_tokens} prompt + "
                f"{self.decode_tokens} decoded tokens; {len(self.predicted)} questions predicted; "
                f"stopped: {self.stopped_by}; remaining: {left}")


class IdleQueue:
    """FIFO of :class:`IdleTask`; the same (kind, question, scope) is queued once.

    :param db_path: the store's SQLite file, or None for memory.
    :param kinds: the task kinds that may be queued (default: the built-in ones; a handle
        passes its registry, which plugins extend).
    :param last: kinds that run only when no task of another kind is runnable (``calibrate``:
        it serves no question, so it waits for the work that does).
    """

    def __init__(self, db_path: Path | None, *, kinds: Collection[str] = TASK_KINDS,
                 last: Collection[str] = ()) -> None:
        self._kinds = kinds
        self._last = tuple(sorted(last))
        self._lock = threading.RLock()
        self._db = connect(db_path, _SCHEMA)
        self._failures: dict[int, int] = {}  # task id -> failed runs in this process

    def failed(self, task: IdleTask) -> float:
        """Record that ``task`` raised: it stays queued (nothing is lost), but becomes runnable
        again only after a back-off that doubles with each failure (1 s up to 5 min), so a task
        that keeps failing neither spins the idle worker nor holds back the tasks behind it.
        Returns the back-off in seconds."""
        with self._lock:
            n = self._failures.get(task.id, 0) + 1
            self._failures[task.id] = n
            delay = retry_delay(n)
            self._db.execute("UPDATE idle_tasks SET not_before = ? WHERE id = ?", (time.time() + delay, task.id))
            return delay

    def push(self, kind: TaskKind | str, question: str, scope: str | None, *, delay_s: float = 0.0) -> bool:
        """Queue a task, runnable after ``delay_s`` (a quiet period); False if the same task is
        already queued (its start is then pushed back by the new quiet period)."""
        if kind not in self._kinds:
            raise ValueError(f"unknown idle task kind {kind!r}; known: {sorted(self._kinds)}")
        now = time.time()
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO idle_tasks (kind, question, scope, created, not_before)"
                " VALUES (?, ?, ?, ?, ?)", (kind, question, scope, now, now + delay_s))
            if cur.rowcount == 1:
                return True
            if delay_s > 0:
                self._db.execute("UPDATE idle_tasks SET not_before = ? WHERE kind = ? AND question = ?"
                                 " AND scope IS ?", (now + delay_s, kind, question, scope))
            return False

    def peek(self, *, ignore_quiet: bool = False) -> IdleTask | None:
        """The oldest runnable task, those of the ``last`` kinds after every other (it stays
        queued until :meth:`done`, so a crash or a preemption mid-task runs it again later). ``ignore_quiet``: also tasks still in their
        quiet period (an explicit ``idle()`` call runs them at once)."""
        with self._lock:
            marks = ", ".join("?" * len(self._last))
            row = self._db.execute(
                f"SELECT {_COLS} FROM idle_tasks WHERE not_before <= ? ORDER BY kind IN ({marks}), id LIMIT 1",
                (float("inf") if ignore_quiet else time.time(), *self._last)).fetchone()
            return None if row is None else IdleTask(*row)

    def done(self, task: IdleTask) -> None:
        with self._lock:
            self._failures.pop(task.id, None)
            self._db.execute("DELETE FROM idle_tasks WHERE id = ?", (task.id,))

    def drop(self, kind: str, keep: Callable[[str, str | None], bool]) -> int:
        """Remove the queued tasks of ``kind`` whose question and scope ``keep`` rejects;
        returns how many."""
        with self._lock:
            rows = self._db.execute("SELECT id, question, scope FROM idle_tasks WHERE kind = ?",
                                    (kind,)).fetchall()
            gone = [(i,) for i, question, scope in rows if not keep(question, scope)]
            self._db.executemany("DELETE FROM idle_tasks WHERE id = ?", gone)
            return len(gone)

    def queued(self, task: IdleTask) -> bool:
        """Whether ``task`` is still queued: a runner storing what it computed checks first,
        since a removal may have dropped the task meanwhile."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM idle_tasks WHERE id = ?", (task.id,)).fetchone() is not None

    def scrub(self) -> bool:
        """Checkpoint the queue's database after :meth:`drop`, so its file keeps no text of the
        dropped tasks (``sqlite_tx.checkpoint``); False when a reader elsewhere kept frames."""
        with self._lock:
            return checkpoint(self._db)

    def pending(self) -> list[IdleTask]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLS} FROM idle_tasks ORDER BY id").fetchall()
            return [IdleTask(*r) for r in rows]

    def counts(self) -> dict[str, int]:
        """Queued tasks per kind."""
        with self._lock:
            rows = self._db.execute("SELECT kind, COUNT(*) FROM idle_tasks GROUP BY kind").fetchall()
            return {str(k): int(n) for k, n in rows}

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM idle_tasks").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
