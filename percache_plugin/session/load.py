"""A saved session read back from its rows and K/V slices (:meth:`~.persist.SessionStore.load`).

Every unreadable part is a miss, never a crash or a wrong cache: unreadable head ids are
tokenized again, an unreadable turn row leaves or loses its memory block (:mod:`.turn_rows`),
an unreadable memory region leaves; each of those, and a missing or corrupt slice
(:mod:`.slices`), makes the session continue from its ids, computed again with the next turn.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import torch

from .forget_rows import read_region
from .slices import read_slices
from .state import Session, Turn, cache_tokens
from .turn_rows import read_ids, read_turn_ids

__all__ = ["load_session"]

log = logging.getLogger("percache")


def load_session(db: sqlite3.Connection, lock: threading.Lock, directory: Path, fp: str, name: str,
                 dtype: torch.dtype, device: torch.device) -> tuple[Session, str] | None:
    """Session ``name`` saved under fingerprint ``fp`` and how its cache was restored
    (``"snapshot"``, or ``"ids"``: the cache is empty and every position is computed with the
    next turn); None if not stored. ``lock`` guards ``db``; ``directory`` holds the slices."""
    with lock:
        row = db.execute("SELECT system, head_ids, first_glue, next_turn, evicted_turns "
                         "FROM chat_sessions WHERE fingerprint = ? AND name = ?", (fp, name)).fetchone()
        if row is None:
            return None
        turns = db.execute(
            "SELECT turn_id, message, user_ids, reply_ids, reply_text, pinned, masked, fact_ids, bare_ids "
            "FROM chat_turns WHERE fingerprint = ? AND name = ? ORDER BY turn_id", (fp, name)).fetchall()
        slices = db.execute("SELECT start, stop, file, checksum, layout FROM chat_kv WHERE "
                            "fingerprint = ? AND name = ? ORDER BY start", (fp, name)).fetchall()
        exact = db.execute("SELECT approx_from FROM chat_exact WHERE fingerprint = ? AND name = ?",
                           (fp, name)).fetchone()
        latest = db.execute("SELECT version, fingerprint FROM chat_version WHERE name = ?", (name,)).fetchone()
        memory = db.execute("SELECT scope, header, facts FROM chat_memory WHERE fingerprint = ? "
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
    layers = read_slices(directory, fp, slices, session.n_tokens)
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
