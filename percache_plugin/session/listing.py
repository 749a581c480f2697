"""Sessions saved under other weights only (a LoRA persona's conversations are saved under its
adapter's fingerprint), counted from their rows for ``pc.sessions.list()``: nothing is loaded."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from .forget_rows import read_region
from .slices import layout_bytes
from .turn_rows import read_ids, read_turn_ids

__all__ = ["StoredSession", "stored_elsewhere"]


@dataclass(frozen=True)
class StoredSession:
    """A saved session's counts, read from its rows (:meth:`~.persist.SessionStore.elsewhere`)."""

    name: str
    fingerprint: str
    system: str | None
    turns: int
    evicted_turns: int
    tokens: int
    kv_tokens: int
    kv_bytes: int


def stored_elsewhere(db: sqlite3.Connection, fingerprint: str) -> list[StoredSession]:
    """The sessions saved under fingerprints other than ``fingerprint`` only, one per name: the
    fingerprint with the most turns (the caller holds the database's lock)."""
    # only the rows of those names: the turns of this fingerprint's own sessions are not read
    elsewhere = "WHERE name NOT IN (SELECT name FROM chat_sessions WHERE fingerprint = ?)"
    fp = (fingerprint,)
    rows = db.execute("SELECT fingerprint, name, system, head_ids, evicted_turns FROM "
                      f"chat_sessions {elsewhere}", fp).fetchall()
    turns = db.execute(f"SELECT fingerprint, name, user_ids, reply_ids FROM chat_turns {elsewhere}", fp).fetchall()
    spans = db.execute(f"SELECT fingerprint, name, stop, layout FROM chat_kv {elsewhere}", fp).fetchall()
    regions = db.execute(f"SELECT fingerprint, name, header, facts FROM chat_memory {elsewhere}", fp).fetchall()
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
        sizes[1] += layout_bytes(layout)
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
