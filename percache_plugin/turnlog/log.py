"""The turn log in the store's SQLite: one row per chat turn, feedback written in place.

Every write is one transaction (a crash leaves a turn logged whole or not at all); the database
file is owner-only like the rest of the store (:func:`~percache_plugin.sqlite_tx.connect`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..sqlite_tx import Schema, checkpoint, connect, transaction
from .record import TurnRecord

__all__ = ["SCHEMA", "TurnLog", "UnknownTurn"]

SCHEMA = Schema("turnlog", 1, """
CREATE TABLE IF NOT EXISTS turn_log (
    log_id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL, turn_id INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, persona TEXT, system TEXT, history TEXT NOT NULL,
    message TEXT NOT NULL, output TEXT NOT NULL, context_hash TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL, fact_ids TEXT NOT NULL, latency_s REAL NOT NULL,
    ttft_s REAL NOT NULL, created REAL NOT NULL, accepted INTEGER, edited_text TEXT,
    feedback_at REAL);
CREATE INDEX IF NOT EXISTS turn_log_by_turn ON turn_log (session, turn_id);
""")

_COLUMNS = ("log_id, session, turn_id, fingerprint, persona, system, history, message, output, "
            "context_hash, prompt_tokens, fact_ids, latency_s, ttft_s, created, accepted, "
            "edited_text, feedback_at")


class UnknownTurn(KeyError):
    """No logged turn with that id in that session; the message says which turns there are."""

    def __str__(self) -> str:
        return str(self.args[0])


class TurnLog:
    """The log of one store (``path`` None: in memory, gone with the handle)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.db = connect(path, SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def append(self, *, session: str, turn_id: int, fingerprint: str, persona: str | None,
               system: str | None, history: Sequence[tuple[str, str]], message: str, output: str,
               context_hash: str, prompt_tokens: int, fact_ids: Sequence[int | str],
               latency_s: float, ttft_s: float) -> TurnRecord:
        """Log one turn (one transaction) and return its record."""
        created = time.time()
        row = (session, turn_id, fingerprint, persona, system, json.dumps([list(h) for h in history]),
               message, output, context_hash, prompt_tokens, json.dumps(list(fact_ids)), latency_s,
               ttft_s, created)
        with self._lock, transaction(self.db):
            cur = self.db.execute(
                "INSERT INTO turn_log (session, turn_id, fingerprint, persona, system, history, "
                "message, output, context_hash, prompt_tokens, fact_ids, latency_s, ttft_s, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
            log_id = int(cur.lastrowid or 0)
        return TurnRecord(log_id, session, turn_id, fingerprint, persona, system,
                          tuple((str(u), str(a)) for u, a in history), message, output, context_hash,
                          prompt_tokens, tuple(fact_ids), latency_s, ttft_s, created)

    def get(self, turn_id: int, session: str) -> TurnRecord:
        """The latest logged turn ``turn_id`` of ``session``.

        :raises UnknownTurn: none logged."""
        with self._lock:
            row = self.db.execute(f"SELECT {_COLUMNS} FROM turn_log WHERE session = ? AND turn_id = ? "
                                  "ORDER BY log_id DESC LIMIT 1", (session, turn_id)).fetchone()
        if row is None:
            raise UnknownTurn(self._unknown(turn_id, session))
        return _record(row)

    def _unknown(self, turn_id: int, session: str) -> str:
        with self._lock:
            lo, hi = self.db.execute("SELECT MIN(turn_id), MAX(turn_id) FROM turn_log WHERE session = ?",
                                     (session,)).fetchone()
        logged = f"turns {lo} to {hi} are" if lo is not None else "no turn is"
        return f"session {session!r} has no logged turn {turn_id} ({logged} logged)"

    def feedback(self, turn_id: int, session: str, *, accepted: bool | None = None,
                 edited_text: str | None = None) -> TurnRecord:
        """Record the user's verdict on a turn (the latest logged turn ``turn_id`` of
        ``session``): ``accepted`` and/or ``edited_text`` (the reply as it should have been).
        Feedback given again replaces what it names; the other field is kept.

        :raises UnknownTurn: no such logged turn.
        :raises ValueError: neither given, ``accepted`` not a bool, ``edited_text`` empty."""
        if accepted is None and edited_text is None:
            raise ValueError("feedback needs accepted=True/False or edited_text=...")
        if accepted is not None and not isinstance(accepted, bool):
            raise ValueError(f"accepted must be True, False or None, got {accepted!r}")
        if edited_text is not None and (not isinstance(edited_text, str) or not edited_text.strip()):
            raise ValueError(f"edited_text must be a non-empty str, got {edited_text!r}")
        if not isinstance(turn_id, int) or isinstance(turn_id, bool):
            raise ValueError(f"turn_id must be an int (reply.turn_id), got {turn_id!r}")
        record = self.get(turn_id, session)
        sets: list[str] = ["feedback_at = ?"]
        args: list[Any] = [time.time()]
        if accepted is not None:
            sets.append("accepted = ?")
            args.append(int(accepted))
        if edited_text is not None:
            sets.append("edited_text = ?")
            args.append(edited_text)
        with self._lock, transaction(self.db):
            self.db.execute(f"UPDATE turn_log SET {', '.join(sets)} WHERE log_id = ?", (*args, record.log_id))
            row = self.db.execute(f"SELECT {_COLUMNS} FROM turn_log WHERE log_id = ?",
                                  (record.log_id,)).fetchone()
        return _record(row)

    def delete_session(self, session: str) -> int:
        """Delete every logged turn of ``session`` (one transaction), then checkpoint the
        database so no old WAL frame keeps their text; returns how many."""
        with self._lock, transaction(self.db):
            deleted = int(self.db.execute("DELETE FROM turn_log WHERE session = ?", (session,)).rowcount)
        if deleted and self.path is not None:
            with self._lock:
                checkpoint(self.db)
        return deleted

    def forget_fact(self, fact_id: str) -> int:
        """Clear the ``context_hash`` and ``prompt_tokens`` of every turn that recalled memory
        fact ``fact_id`` (a forgotten fact) and of every later turn of its session (the fact
        stayed in their context: in the history as text, or in the memory region; a reset or
        an eviction may have taken it out sooner, and those lose theirs too): the hash of a
        context holding its text would confirm a guess of that text, the prompt's length less
        the rest of the logged context is the fact's length, and the session no longer holds
        that context. The turn's message, reply and ``fact_ids`` (ids only, tombstones) stay.
        Returns the rows changed."""
        with self._lock, transaction(self.db):
            rows = self.db.execute("SELECT log_id, session, fact_ids, context_hash != '' OR prompt_tokens != 0 "
                                   "FROM turn_log ORDER BY log_id").fetchall()
            held: set[str] = set()  # sessions whose context held the fact from a logged turn on
            hit = []
            for log_id, session, ids, hashed in rows:
                if session in held or fact_id in json.loads(ids):
                    held.add(session)
                    hit += [(log_id,)] if hashed else []
            self.db.executemany("UPDATE turn_log SET context_hash = '', prompt_tokens = 0 WHERE log_id = ?", hit)
        if hit and self.path is not None:  # no old WAL frame keeps the hash
            with self._lock:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return len(hit)

    def records(self, *, persona: str | None = None, session: str | None = None) -> Iterator[TurnRecord]:
        """Every logged turn, oldest first (optionally of one persona or session)."""
        where, args = [], []
        for column, value in (("persona", persona), ("session", session)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = f"SELECT {_COLUMNS} FROM turn_log"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self.db.execute(sql + " ORDER BY log_id", args).fetchall()
        return (_record(r) for r in rows)

    def __len__(self) -> int:
        with self._lock:
            return int(self.db.execute("SELECT COUNT(*) FROM turn_log").fetchone()[0])


def _record(row: Any) -> TurnRecord:
    history = tuple((str(u), str(a)) for u, a in json.loads(row[6]))
    accepted = None if row[15] is None else bool(row[15])
    return TurnRecord(int(row[0]), row[1], int(row[2]), row[3], row[4], row[5], history, row[7], row[8],
                      row[9], int(row[10]), tuple(json.loads(row[11])), float(row[12]), float(row[13]),
                      float(row[14]), accepted, row[16], row[17])
