"""Sessions on disk: each turn appends its K/V slice (one safetensors file, written to a temp
file, fsynced and renamed) and its row (SQLite), bound to the model fingerprint.

Loading concatenates the slices; a missing or corrupt slice (checksum, shape, metadata) or a
gap makes the session fall back to re-prefilling from its stored ids: never a wrong cache.
Eviction and edits rewrite only what changed (slices from the first changed position on, rows
of turns that left).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..filemodes import private_dir
from ..kv.integrity import (
    CorruptNodeError,
    TensorSpec,
    checksum_tensors,
    read_node_file,
    write_node_file,
)
from ..sqlite_tx import checkpoint, connect, transaction
from .forget_rows import SessionCut, drop_fact_rows, read_region
from .schema import (
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
from .state import Session, Turn, cache_tokens
from .turn_rows import read_ids, read_turn_ids

__all__ = ["SessionStore", "StoredSession", "SCHEMA", "EXACT_SCHEMA", "VERSION_SCHEMA", "MEMORY_SCHEMA",
           "SESSIONS_DIR", "SESSIONS_DB"]

log = logging.getLogger("percache")

_INSERT_TURN = (f"INSERT OR REPLACE INTO chat_turns ({', '.join(TURN_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(TURN_COLUMNS))})")


@dataclass(frozen=True)
class StoredSession:
    """A saved session's counts, read from its rows (:meth:`SessionStore.elsewhere`)."""

    name: str
    fingerprint: str
    system: str | None
    turns: int
    evicted_turns: int
    tokens: int
    kv_tokens: int
    kv_bytes: int


class SessionStore:
    """The sessions of one fingerprint under ``root/sessions``."""

    def __init__(self, root: Path, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self.dir = private_dir(root / SESSIONS_DIR / fingerprint[:32])
        self.db = connect(root / SESSIONS_DB, SCHEMA, EXACT_SCHEMA, VERSION_SCHEMA, MEMORY_SCHEMA)
        try:
            migrate(self.db)
        except BaseException:
            self.db.close()
            raise
        self._lock = threading.Lock()

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
        # only the rows of those names: the turns of this fingerprint's own sessions are not read
        elsewhere = "WHERE name NOT IN (SELECT name FROM chat_sessions WHERE fingerprint = ?)"
        fp = (self.fingerprint,)
        with self._lock:
            rows = self.db.execute("SELECT fingerprint, name, system, head_ids, evicted_turns FROM "
                                   f"chat_sessions {elsewhere}", fp).fetchall()
            turns = self.db.execute(f"SELECT fingerprint, name, user_ids, reply_ids FROM chat_turns {elsewhere}",
                                    fp).fetchall()
            spans = self.db.execute(f"SELECT fingerprint, name, stop, layout FROM chat_kv {elsewhere}", fp).fetchall()
            regions = self.db.execute(f"SELECT fingerprint, name, header, facts FROM chat_memory {elsewhere}",
                                      fp).fetchall()
        read = {(fp, name): read_region(h, fs) or ([], [], None) for fp, name, h, fs in regions}
        region = {key: len(h) + sum(len(f.ids) for f in fs) if fs else 0 for key, (h, fs, _) in read.items()}
        n_turns: dict[tuple[str, str], list[int]] = {}
        for fp, name, user_ids, reply_ids in turns:
            counts = n_turns.setdefault((fp, name), [0, 0])
            got = read_turn_ids(user_ids, reply_ids, "[]", None)  # an unreadable turn is not loaded either
            counts[0] += got is not None
            counts[1] += 0 if got is None else len(got.user_ids) + len(got.reply_ids)
        kv: dict[tuple[str, str], list[int]] = {}
        for fp, name, stop, layout in spans:
            sizes = kv.setdefault((fp, name), [0, 0])
            sizes[0] = max(sizes[0], stop)
            sizes[1] += sum(_DTYPE_BYTES.get(d, 4) * _numel(list(shape)) for _, d, shape in _layout(layout) or [])
        best: dict[str, StoredSession] = {}
        for fp, name, system, head, evicted in rows:
            count, tokens = n_turns.get((fp, name), [0, 0])
            kv_tokens, kv_bytes = kv.get((fp, name), [0, 0])
            info = StoredSession(name, fp, system, count, evicted,
                                 len(read_ids(head) or []) + region.get((fp, name), 0) + tokens,
                                 kv_tokens, kv_bytes)
            if name not in best or info.turns > best[name].turns:
                best[name] = info
        return [best[n] for n in sorted(best)]

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
            tensors = {}
            for i, lay in enumerate(session.cache.layers):
                tensors[f"k.{i}"] = lay.keys[0, :, start:stop].contiguous()
                tensors[f"v.{i}"] = lay.values[0, :, start:stop].contiguous()
            path = self.dir / f"{_safe(name)}-{start}-{stop}.safetensors"
            write_node_file(path, tensors, {"fingerprint": fp, "session": name})
            checksum = checksum_tensors(tensors.values())
            layout = json.dumps([(k, str(t.dtype), list(t.shape)) for k, t in tensors.items()])
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
        an adapter switch is saved under the new weights' fingerprint too); the new version."""
        with self._lock, transaction(self.db):
            version = self._bump(name, 0)
            files = self.db.execute("SELECT fingerprint, file FROM chat_kv WHERE name = ?",
                                    (name,)).fetchall()
            for table in ("chat_sessions", "chat_turns", "chat_kv", "chat_exact", "chat_memory"):
                self.db.execute(f"DELETE FROM {table} WHERE name = ?", (name,))
        with self._lock:  # no old WAL frame keeps its turns (rows are zeroed by secure_delete)
            checkpoint(self.db)
        for fp, file in files:
            (self.dir.parent / fp[:32] / file).unlink(missing_ok=True)
        # and slices no row names: a save whose transaction failed after its file was written
        for path in self.dir.parent.glob(f"*/{_safe(name)}-*.safetensors"):
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
        fp = self.fingerprint
        with self._lock:
            row = self.db.execute("SELECT system, head_ids, first_glue, next_turn, evicted_turns "
                                  "FROM chat_sessions WHERE fingerprint = ? AND name = ?",
                                  (fp, name)).fetchone()
            if row is None:
                return None
            turns = self.db.execute(
                "SELECT turn_id, message, user_ids, reply_ids, reply_text, pinned, masked, fact_ids, bare_ids "
                "FROM chat_turns "
                "WHERE fingerprint = ? AND name = ? ORDER BY turn_id", (fp, name)).fetchall()
            slices = self.db.execute("SELECT start, stop, file, checksum, layout FROM chat_kv WHERE "
                                     "fingerprint = ? AND name = ? ORDER BY start", (fp, name)).fetchall()
            exact = self.db.execute("SELECT approx_from FROM chat_exact WHERE fingerprint = ? AND "
                                    "name = ?", (fp, name)).fetchone()
            latest = self.db.execute("SELECT version, fingerprint FROM chat_version WHERE name = ?",
                                     (name,)).fetchone()
            memory = self.db.execute("SELECT scope, header, facts FROM chat_memory WHERE fingerprint = ? "
                                     "AND name = ?", (fp, name)).fetchone()
        head = read_ids(row[1])
        session = Session(name, row[0], head or [], row[2], next_turn=row[3], evicted_turns=row[4])
        if head is None:  # the head is the system prompt in the template: tokenized again (chat.py)
            log.warning("percache: session %r's head ids are unreadable; they are tokenized again", name)
            session.head_unreadable, slices, session.rewrite = True, [], True
        # rows of other weights are newer: the next turn reads those (-1 never matches)
        session.version = 0 if latest is None else latest[0] if latest[1] == fp else -1
        for t in turns:
            ids = read_turn_ids(t[2], t[3], t[7], t[8])
            if ids is None or ids.repaired:
                session.unreadable_turns.append(t[0])
            if ids is not None:
                session.turns.append(Turn(t[0], t[1], ids.user_ids, ids.reply_ids, t[4], bool(t[5]), bool(t[6]),
                                          ids.fact_ids, ids.bare_ids))
        if session.unreadable_turns:  # the snapshot's positions no longer match the turns: not served
            kept = {t.turn_id for t in session.turns}
            log.warning("percache: session %r has unreadable turn rows: turns %s dropped, turns %s without "
                        "their memory block; the rest is computed again with the next turn", name,
                        [i for i in session.unreadable_turns if i not in kept],
                        [i for i in session.unreadable_turns if i in kept])
            slices, session.rewrite = [], True
        region = None if memory is None else read_region(memory[1], memory[2], memory[0])
        if region is not None:
            session.memory_header, session.memory, session.memory_scope = region
        elif memory is not None:  # its K/V snapshot holds the region's positions: not served
            log.warning("percache: session %r's memory region is unreadable; it continues without it", name)
            slices, session.rewrite = [], True
        layers = self._read(slices, session.n_tokens)
        if layers is None:
            if slices:  # stored and unreadable: missing, corrupt or out of order
                log.warning("percache: session %r has no usable K/V snapshot; its %d tokens are "
                            "computed again with the next turn", name, session.n_tokens)
            else:  # nothing stored, e.g. a forget cut the snapshot before its first position
                log.info("percache: session %r has no K/V stored; its %d tokens are computed "
                         "with the next turn", name, session.n_tokens)
            return session, "ids"
        for i, (k, v) in enumerate(layers):
            session.cache.update(k.to(device=device, dtype=dtype)[None], v.to(device=device, dtype=dtype)[None], i)
        session.saved_upto = cache_tokens(session.cache)
        session.approx_from = 0 if exact is None else exact[0]
        return session, "snapshot"

    def _read(self, slices: list[Any], n_ids: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        pos, parts = 0, []
        for start, stop, file, checksum, layout in slices:
            if start != pos:
                return None
            specs = _layout(layout)
            if specs is None or any(len(s) < 2 or s[1] != stop - start for _, _, s in specs):
                return None
            try:
                parts.append(read_node_file(self.dir / file, expected_metadata={"fingerprint": self.fingerprint},
                                            layout=specs, checksum=checksum))
            except (CorruptNodeError, OSError, ValueError):
                return None
            pos = stop
        if not parts or pos > n_ids:
            return None
        n_layers = len(parts[0]) // 2
        return [(torch.cat([p[f"k.{i}"] for p in parts], dim=1), torch.cat([p[f"v.{i}"] for p in parts], dim=1))
                for i in range(n_layers)]


_DTYPE_BYTES = {"torch.float32": 4, "torch.float16": 2, "torch.bfloat16": 2, "torch.float64": 8}


def _layout(text: str) -> list[TensorSpec] | None:
    """A ``chat_kv`` row's tensor layout; None when it is not the JSON written (the slice is a miss)."""
    try:
        return [(str(n), str(d), tuple(int(x) for x in s)) for n, d, s in json.loads(text)]
    except (TypeError, ValueError):
        return None


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _safe(name: str) -> str:
    import hashlib

    return hashlib.blake2b(name.encode(), digest_size=8).hexdigest()
