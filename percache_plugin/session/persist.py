"""Sessions on disk: each turn appends its K/V slice (:mod:`.slices`) and its rows (SQLite),
bound to the model fingerprint. Eviction and edits rewrite only what changed (slices from the
first changed position on, rows of turns that left).

Loading is :mod:`.load` (every unreadable part a miss), the sessions of other weights are
counted by :mod:`.listing`, and a forgotten fact leaves the rows by :mod:`.forget_rows`.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import torch

from ..filemodes import private_dir
from ..sqlite_tx import checkpoint, connect, transaction
from .block_tags import BlockTags
from .forget_rows import SessionCut, drop_fact_rows
from .listing import StoredSession, stored_elsewhere
from .load import load_session
from .schema import (
    BLOCKS_SCHEMA,
    BUMP,
    EXACT_SCHEMA,
    MEMORY_SCHEMA,
    SCHEMA,
    SESSIONS_DB,
    SESSIONS_DIR,
    TURN_COLUMNS,
    VERSION_SCHEMA,
    migrate,
)
from .slices import slice_prefix, write_slice
from .state import Session, cache_tokens

__all__ = ["SessionStore", "StoredSession", "SCHEMA", "EXACT_SCHEMA", "VERSION_SCHEMA", "MEMORY_SCHEMA",
           "SESSIONS_DIR", "SESSIONS_DB"]

log = logging.getLogger("percache")

_INSERT_TURN = (f"INSERT OR REPLACE INTO chat_turns ({', '.join(TURN_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(TURN_COLUMNS))})")


class SessionStore:
    """The sessions of one fingerprint under ``root/sessions``."""

    def __init__(self, root: Path, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self.dir = private_dir(root / SESSIONS_DIR / fingerprint[:32])
        self.db = connect(root / SESSIONS_DB, SCHEMA, EXACT_SCHEMA, VERSION_SCHEMA, MEMORY_SCHEMA,
                          BLOCKS_SCHEMA)
        try:
            migrate(self.db)
        except BaseException:
            self.db.close()
            raise
        self._lock = threading.Lock()
        self.tags = BlockTags(self.db, self._lock)  # the prefix blocks sessions published

    def close(self) -> None:
        self.db.close()

    def names(self) -> list[str]:
        with self._lock:
            rows = self.db.execute("SELECT name FROM chat_sessions WHERE fingerprint = ?",
                                   (self.fingerprint,)).fetchall()
        return [r[0] for r in rows]

    def elsewhere(self) -> list[StoredSession]:
        """Sessions saved under other fingerprints only (a LoRA persona's conversations are
        saved under its adapter's weights), read from their rows: nothing is loaded. One per
        name: the fingerprint with the most turns."""
        with self._lock:
            return stored_elsewhere(self.db, self.fingerprint)

    def latest(self, name: str) -> tuple[int, str] | None:
        """The stored version of session ``name`` and the fingerprint whose rows hold it (None:
        never saved since versions were kept)."""
        with self._lock:
            row = self.db.execute("SELECT version, fingerprint FROM chat_version WHERE name = ?",
                                  (name,)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def _bump(self, name: str, version: int) -> int:
        """Record a change of ``name`` (inside the caller's transaction); the new version."""
        self.db.execute(BUMP, (name, version + 1, self.fingerprint))
        (new,) = self.db.execute("SELECT version FROM chat_version WHERE name = ?", (name,)).fetchone()
        return int(new)

    # -- saving -------------------------------------------------------------------------
    def save(self, session: Session, rewrite_turns: bool) -> None:
        """Append what the last turn added; with ``rewrite_turns`` (after an eviction or an
        edit) replace the turn rows and the K/V slices from ``session.saved_upto`` on."""
        fp, name = self.fingerprint, session.name
        start, stop = session.saved_upto, cache_tokens(session.cache)
        with self._lock:  # a slice that straddles ``start`` is rewritten from its own start
            (lowest,) = self.db.execute("SELECT MIN(start) FROM chat_kv WHERE fingerprint = ? AND "
                                        "name = ? AND stop > ?", (fp, name, start)).fetchone()
        start = min(start, lowest) if lowest is not None else start
        path = None
        if stop > start:
            path, checksum, layout = write_slice(self.dir, name, fp, session.cache, start, stop)
        with self._lock, transaction(self.db):
            self.db.execute(
                "INSERT OR REPLACE INTO chat_sessions VALUES (?, ?, ?, ?, ?, ?, ?)",
                (fp, name, session.system, json.dumps(session.head_ids), session.first_glue,
                 session.next_turn, session.evicted_turns))
            self.db.execute("INSERT OR REPLACE INTO chat_exact VALUES (?, ?, ?)",
                            (fp, name, session.approx_from))
            self.db.execute("INSERT OR REPLACE INTO chat_memory VALUES (?, ?, ?, ?, ?)",
                            (fp, name, json.dumps(session.memory_scope), json.dumps(session.memory_header),
                             json.dumps([[f.fact_id, f.text_hash, list(f.ids)] for f in session.memory])))
            turns = session.turns if rewrite_turns else session.turns[-1:]
            if rewrite_turns:
                self.db.execute("DELETE FROM chat_turns WHERE fingerprint = ? AND name = ?", (fp, name))
            for t in turns:
                self.db.execute(
                    _INSERT_TURN,
                    (fp, name, t.turn_id, t.message, json.dumps(t.user_ids), json.dumps(t.reply_ids),
                     t.reply_text, int(t.pinned), int(t.masked), json.dumps(t.fact_ids),
                     None if t.bare_ids is None else json.dumps(t.bare_ids)))
            stale = self.db.execute(
                "SELECT file FROM chat_kv WHERE fingerprint = ? AND name = ? AND stop > ?",
                (fp, name, start)).fetchall()
            self.db.execute("DELETE FROM chat_kv WHERE fingerprint = ? AND name = ? AND stop > ?",
                            (fp, name, start))
            if path is not None:
                self.db.execute("INSERT INTO chat_kv VALUES (?, ?, ?, ?, ?, ?, ?)",
                                (fp, name, start, stop, path.name, checksum, layout))
            version = self._bump(name, session.version)
        for (file,) in stale:
            if path is None or file != path.name:
                (self.dir / file).unlink(missing_ok=True)
        session.saved_upto, session.version = stop, version

    def delete(self, name: str) -> int:
        """Remove the session ``name`` under every fingerprint (a conversation continued after
        an adapter switch is saved under the new weights' fingerprint too), with the tags of
        the blocks it published (the caller deletes those blocks first, ``tags.drop_session``);
        the new version."""
        with self._lock, transaction(self.db):
            version = self._bump(name, 0)
            files = self.db.execute("SELECT fingerprint, file FROM chat_kv WHERE name = ?",
                                    (name,)).fetchall()
            for table in ("chat_sessions", "chat_turns", "chat_kv", "chat_exact", "chat_memory", "chat_blocks"):
                self.db.execute(f"DELETE FROM {table} WHERE name = ?", (name,))
        with self._lock:  # no old WAL frame keeps its turns (rows are zeroed by secure_delete)
            checkpoint(self.db)
        for fp, file in files:
            (self.dir.parent / fp[:32] / file).unlink(missing_ok=True)
        # and slices no row names: a save whose transaction failed after its file was written
        for path in self.dir.parent.glob(f"*/{slice_prefix(name)}-*.safetensors"):
            path.unlink(missing_ok=True)
        return version

    def saved(self, name: str) -> bool:
        """Whether session ``name`` is saved under any fingerprint."""
        with self._lock:
            return self.db.execute("SELECT 1 FROM chat_sessions WHERE name = ? LIMIT 1",
                                   (name,)).fetchone() is not None

    def drop_fact(self, fact_id: str) -> list[SessionCut]:
        """Take memory fact ``fact_id`` out of every saved session under every fingerprint: its
        memory region, the turns it was recalled into as text, and the K/V slices from the
        first changed position on (:mod:`.forget_rows`); returns the sessions changed."""
        with self._lock, transaction(self.db):
            changed, files = drop_fact_rows(self.db, fact_id)
        if changed:  # no old WAL frame keeps the fact's ids (rows are zeroed by secure_delete)
            with self._lock:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        for fp, file in files:
            (self.dir.parent / fp[:32] / file).unlink(missing_ok=True)
        for cut in changed:
            if cut.turns_unreadable:
                log.warning("percache: forget cleaned %d unreadable turn rows of session %r (dropped, or their "
                            "memory block removed)", cut.turns_unreadable, cut.name)
        return changed

    # -- loading ------------------------------------------------------------------------
    def load(self, name: str, dtype: torch.dtype, device: torch.device) -> tuple[Session, str] | None:
        """The session and how its cache was restored (``"snapshot"`` or ``"ids"``: the cache
        is empty and every position is computed with the next turn); None if not stored."""
        return load_session(self.db, self._lock, self.dir, self.fingerprint, name, dtype, device)
