"""A journal that makes forgetting durable: what is built on a removed chunk or a forgotten fact
(stored answers, K/V under every fingerprint, predictions) goes even when the first try fails.

A forget writes one row per id (``forget_journal`` in the store's database) *before* its first
step and deletes it once its last step succeeded. A row left behind names a forget that failed
(a full disk, a locked database, a plugin that raised) or whose process was killed part way;
:meth:`ForgetJournal.recover` (on ``enable()``, before each ``ask()`` and each run of idle work,
in every process sharing the store) runs it again. Nothing that still resolves is ever deleted:
an id that resolves again (a failed removal rolled back, a re-added identical text, a chunk
only a user's retriever plugin knows) is not forgotten again; its row is dropped once its
owner is no longer forgetting it (the owner process has ended, or it is this journal and the
forget is not in flight). A forget run just before a removal (``keep``) leaves its rows until
the pass run after the removal clears them: a crash between the two is completed later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from .best_effort import WRITE_FAILURES, retry_delay
from .sqlite_tx import Schema, connect, transaction

__all__ = ["ForgetJournal", "ForgetKind", "JournalCounts"]

log = logging.getLogger("percache")

_SCHEMA = Schema("forget_journal", 1, """
CREATE TABLE IF NOT EXISTS forget_journal (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    owner TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (kind, id)
);
""")


@dataclass(frozen=True)
class ForgetKind:
    """How a kind of id (``"chunk"``, ``"fact"``) is checked and forgotten again.

    :ivar resolves: whether the id still names something (then nothing built on it is deleted).
    :ivar rerun: forgets the ids again (every step; raises on a failure).
    """

    resolves: Callable[[str], bool]
    rerun: Callable[[list[str]], object]


@dataclass
class JournalCounts:
    """Forgets completed by a re-run (ids), re-runs that failed, rows dropped because their id
    resolves again (nothing deleted), and ids forgotten without a row (writing it failed)."""

    rerun: int = 0
    rerun_failed: int = 0
    resolved_again: int = 0
    unjournaled: int = 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class ForgetJournal:
    """The forget journal of one handle on the database at ``db_path`` (None: in memory).
    Thread-safe; several handles and processes may share the table."""

    def __init__(self, db_path: Path | None) -> None:
        self._db = connect(db_path, _SCHEMA)
        self._lock = threading.RLock()
        self._owner = f"{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._kinds: dict[str, ForgetKind] = {}
        self._flight: Counter[tuple[str, str]] = Counter()
        self._failures = 0
        self._retry_at = 0.0
        self.counts = JournalCounts()

    def register(self, kind: str, how: ForgetKind) -> None:
        """Say how ids of ``kind`` resolve and are forgotten again (rows of a kind nobody
        registered stay until a handle that knows it opens the store)."""
        with self._lock:
            self._kinds[kind] = how

    @contextlib.contextmanager
    def forgetting(self, kind: str, ids: Collection[str], *, keep: bool = False) -> Iterator[None]:
        """Journal the forget of ``ids`` around the block: rows written first (committed), and
        deleted when the block ends without an exception, unless ``keep`` (a forget before a
        removal: the pass after it clears them)."""
        key = sorted(set(ids))
        with self._lock:
            try:
                with transaction(self._db):
                    self._db.executemany("INSERT OR REPLACE INTO forget_journal VALUES (?, ?, ?, ?)",
                                         [(kind, i, self._owner, time.time()) for i in key])
            except WRITE_FAILURES as exc:  # the forget itself is still tried: it may succeed
                self.counts.unjournaled += len(key)
                log.warning("percache: journaling the forget of %d %s(s) failed (%s: %s); a failure "
                            "now is not completed later", len(key), kind, type(exc).__name__, exc)
            self._flight.update((kind, i) for i in key)
        try:
            yield
            if not keep:
                self.clear(kind, key)
        finally:
            with self._lock:
                self._flight.subtract((kind, i) for i in key)
                self._flight = +self._flight

    def clear(self, kind: str, ids: Collection[str]) -> None:
        """Drop the rows of ``ids``: what was built on them is gone."""
        with self._lock, transaction(self._db):
            self._db.executemany("DELETE FROM forget_journal WHERE kind = ? AND id = ?",
                                 [(kind, i) for i in ids])

    def pending(self) -> list[tuple[str, str, str]]:
        """``(kind, id, owner)`` of every row, oldest first."""
        with self._lock:
            return [(str(k), str(i), str(o)) for k, i, o in self._db.execute(
                "SELECT kind, id, owner FROM forget_journal ORDER BY created, kind, id")]

    def recover(self, *, force: bool = False) -> int:
        """Run again the forgets the rows name whose ids no longer resolve (see the module
        docstring); returns how many ids were forgotten. A re-run that fails is logged and
        counted (``counts.rerun_failed``) and tried again after a back-off (``force``: now)."""
        with self._lock:
            if not force and time.monotonic() < self._retry_at:
                return 0
            done = 0
            try:  # reading the table may fail too (a database gone bad): never the request
                rows = self.pending()
                for kind, how in self._kinds.items():
                    mine = [(i, o) for k, i, o in rows if k == kind]
                    if mine:
                        done += self._recover_kind(kind, how, mine)
            except Exception as exc:  # a background repair: it must not fail the request
                self.counts.rerun_failed += 1
                self._failures += 1
                wait = retry_delay(self._failures)
                self._retry_at = time.monotonic() + wait
                log.warning("percache: forgetting again what was built on removed sources failed "
                            "(%s: %s); tried again in %.0f s", type(exc).__name__, exc, wait)
                return done
            self._failures = 0
            self._retry_at = 0.0
            return done

    def _recover_kind(self, kind: str, how: ForgetKind, rows: list[tuple[str, str]]) -> int:
        gone: list[str] = []
        settled: list[str] = []
        for i, owner in rows:
            if not self._resolves(i):
                gone.append(i)
            elif not self._in_flight(kind, i, owner):  # its removal never happened: nothing to do
                settled.append(i)
        if settled:
            self.clear(kind, settled)
            self.counts.resolved_again += len(settled)
        if gone:
            how.rerun(gone)
            self.clear(kind, gone)
            self.counts.rerun += len(gone)
            log.info("percache: forgot again what was built on %d removed %s(s)", len(gone), kind)
        return len(gone)

    def _resolves(self, chunk_id: str) -> bool:
        """Whether any kind resolves the id (a fact retrieved as a chunk is journaled as one)."""
        return any(how.resolves(chunk_id) for how in self._kinds.values())

    def _in_flight(self, kind: str, chunk_id: str, owner: str) -> bool:
        """Whether the row's owner may still be forgetting the id (its removal to follow)."""
        if owner == self._owner:
            return self._flight[(kind, chunk_id)] > 0
        pid = owner.split(":", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            return True  # another handle of this process: it clears its own rows
        return _pid_alive(int(pid))

    def close(self) -> None:
        with self._lock:
            self._db.close()
