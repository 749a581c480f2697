"""Persistent state of the prediction layer: per-scope abstract (with the chunks it was built
from), pending chunks, history."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from ..sqlite_tx import Schema, checkpoint, connect, transaction

__all__ = ["CHUNK_TASK", "PredictionState", "REBUILD_ABSTRACT", "ROUND_TASK", "task_chunk"]

CHUNK_TASK = "chunk "  # a knowledge prediction about one chunk: "chunk <id>", round 1
ROUND_TASK = "chunk {id} round {r}"  # later rounds sample other questions

# The question of an ``abstract`` idle task that builds the scope's abstract again from every
# chunk the scope holds (queued when chunks it was built from were removed).
REBUILD_ABSTRACT = "rebuild"

_SCHEMA = Schema("predict", 1, """
CREATE TABLE IF NOT EXISTS predict_abstract (scope TEXT PRIMARY KEY, text TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS predict_pending (scope TEXT, chunk_id TEXT NOT NULL, added REAL NOT NULL,
    PRIMARY KEY (scope, chunk_id));
CREATE TABLE IF NOT EXISTS predict_history (id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT,
    question TEXT NOT NULL, asked REAL NOT NULL);
CREATE TABLE IF NOT EXISTS predict_abstract_sources (scope TEXT NOT NULL, chunk_id TEXT NOT NULL,
    PRIMARY KEY (scope, chunk_id));
CREATE TABLE IF NOT EXISTS predict_origins (scope TEXT NOT NULL, question TEXT NOT NULL,
    chunk_id TEXT NOT NULL, PRIMARY KEY (scope, question, chunk_id));
""")  # the last two came later: an older store's abstract and predictions have no rows there


def task_chunk(question: str) -> tuple[str, bool] | None:
    """The chunk id a knowledge prediction task names, and whether it is a later round; None
    for an older queue entry (which asked about the abstract)."""
    if not question.startswith(CHUNK_TASK):
        return None
    cid, _, later = question[len(CHUNK_TASK):].partition(" round ")
    return cid, bool(later)


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

    def set_abstract(self, scope: str | None, text: str, sources: Sequence[str] = (), *,
                     continued: bool = True) -> None:
        """Set the scope's abstract; ``sources``: the chunks summarized into it now, added to
        those of the abstract it continues (``continued``) or replacing them."""
        with self._lock, transaction(self._db):
            if not continued:
                self._db.execute("DELETE FROM predict_abstract_sources WHERE scope = ?", (_s(scope),))
            self._db.execute("INSERT OR REPLACE INTO predict_abstract VALUES (?, ?, ?)",
                             (_s(scope), text, time.time()))
            self._db.executemany("INSERT OR IGNORE INTO predict_abstract_sources VALUES (?, ?)",
                                 [(_s(scope), c) for c in sources])

    # questions predicted from a chunk ---------------------------------------------------------
    def note_predicted(self, scope: str | None, chunk_id: str, questions: Sequence[str]) -> None:
        """``questions`` were predicted from chunk ``chunk_id``: they go when it goes."""
        with self._lock:
            self._db.executemany("INSERT OR IGNORE INTO predict_origins VALUES (?, ?, ?)",
                                 [(_s(scope), q, chunk_id) for q in questions])

    def predicted_from(self, chunk_ids: Collection[str]) -> set[tuple[str | None, str]]:
        """``(scope, question)`` of the questions predicted from these chunks."""
        ids = set(chunk_ids)
        with self._lock:
            rows = self._db.execute("SELECT scope, question, chunk_id FROM predict_origins").fetchall()
        return {(None if s == _NULL else s, q) for s, q, c in rows if c in ids}

    def forget_chunks(self, chunk_ids: Collection[str]) -> list[str | None]:
        """Removed chunks: drop them from the pending lists and the questions' origins, and
        drop every abstract built from one of them, or whose sources are not recorded (an older
        store's); returns the scopes whose abstract was dropped. The database is checkpointed,
        so its file keeps no text of a dropped abstract or question, nor the rows (keys, token
        hashes) of the chunks' K/V nodes deleted before in the same file."""
        ids = set(chunk_ids)
        with self._lock, transaction(self._db):
            self._db.executemany("DELETE FROM predict_pending WHERE chunk_id = ?", [(c,) for c in ids])
            self._db.executemany("DELETE FROM predict_origins WHERE chunk_id = ?", [(c,) for c in ids])
            built = {s for s, c in self._db.execute("SELECT scope, chunk_id FROM predict_abstract_sources")
                     if c in ids}
            unknown = {r[0] for r in self._db.execute(
                "SELECT scope FROM predict_abstract WHERE scope NOT IN "
                "(SELECT scope FROM predict_abstract_sources)")}
            dropped = sorted(built | unknown)
            self._db.executemany("DELETE FROM predict_abstract WHERE scope = ?", [(s,) for s in dropped])
            self._db.executemany("DELETE FROM predict_abstract_sources WHERE scope = ?",
                                 [(s,) for s in dropped])
        if ids:  # the store's one database file: the chunks' K/V rows deleted before go too
            checkpoint(self._db)
        return [None if s == _NULL else s for s in dropped]

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
