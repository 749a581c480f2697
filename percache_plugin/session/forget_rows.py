"""A forgotten memory fact leaves every saved session, in its rows (used by
:meth:`~.persist.SessionStore.drop_fact`, for ``pc.memory.forget`` and ``percache memory forget``).

A fact reaches a saved session two ways:

* in its memory region (``memory_recall_mode`` 'splice'): the fact leaves the region;
* recalled as text into turns (``memory_recall_mode`` 'text'): each such turn's user ids are
  replaced by its ids without the memory block (``bare_ids``); a turn that recalled other facts
  too loses its whole memory block (they are recalled again only by a later turn). The turn's
  message, reply and turn id stay: the conversation the user sees is unchanged.

Either way the session's K/V slices from the first changed position on are deleted (they hold
the fact or attended to it; the next turn computes them again from the ids), and its version is
bumped, so every other copy of the session (handles, processes) reads it again before a turn.
"""

from __future__ import annotations

import json
import sqlite3
from typing import NamedTuple

from .state import RegionFact
from .turn_rows import read_ids, read_turn_ids

__all__ = ["SessionCut", "drop_fact_rows", "read_region"]


def read_region(header: str, facts: str, scope: str = "null"
                ) -> tuple[list[int], list[RegionFact], str | None] | None:
    """A saved memory region's header ids, facts and scope (a ``chat_memory`` row's columns);
    None when the row is unreadable (not the JSON written): the region is then a miss, dropped."""
    try:
        name = json.loads(scope)
        if name is not None and not isinstance(name, str):
            return None
        return ([int(t) for t in json.loads(header)],
                [RegionFact(str(f[0]), str(f[1]), tuple(int(t) for t in f[2])) for f in json.loads(facts)], name)
    except (ValueError, TypeError, IndexError, KeyError):
        return None


class SessionCut(NamedTuple):
    """A saved session a forgotten fact was taken out of."""

    fingerprint: str
    name: str
    former_ids: list[int]  # the conversation's ids before (to find the prefix blocks holding them)
    start: int  # the first changed position: the session's K/V from here on is gone
    turns_rewritten: int  # turns whose memory block was removed ('text' mode)
    turns_unreadable: int = 0  # corrupt turn rows: deleted, or their memory block removed (turn_rows.py)


def drop_fact_rows(db: sqlite3.Connection, fact_id: str) -> tuple[list[SessionCut], list[tuple[str, str]]]:
    """Take ``fact_id`` out of every saved session's rows under every fingerprint (inside the
    caller's write transaction); returns the sessions changed and ``(fingerprint, file)`` of the
    K/V slice files to delete once the transaction has committed."""
    changed, files = [], []
    for fp, name, head_json in db.execute("SELECT fingerprint, name, head_ids FROM chat_sessions").fetchall():
        key = (fp, name)
        head = read_ids(head_json)  # None: unreadable, its length unknown (a change cuts from 0)
        memory = db.execute("SELECT header, facts FROM chat_memory WHERE fingerprint = ? AND name = ?",
                            key).fetchone()
        read = ([], [], None) if memory is None else read_region(memory[0], memory[1])
        header, facts, _ = read or ([], [], None)
        region = header + [t for f in facts for t in f.ids] if facts else []
        turns = db.execute("SELECT turn_id, user_ids, reply_ids, fact_ids, bare_ids FROM chat_turns "
                           "WHERE fingerprint = ? AND name = ? ORDER BY turn_id", key).fetchall()
        ids = (head or []) + region
        cut = None
        at = next((i for i, f in enumerate(facts) if f.fact_id == fact_id), None)
        if read is None:  # unreadable: it may hold the fact; the region leaves whole
            cut, at = len(head or []), None
            db.execute("UPDATE chat_memory SET header = '[]', facts = '[]' WHERE fingerprint = ? AND name = ?", key)
        if at is not None:
            cut = len(head or []) + (len(header) + sum(len(f.ids) for f in facts[:at]) if at else 0)
            db.execute("UPDATE chat_memory SET facts = ? WHERE fingerprint = ? AND name = ?",
                       (json.dumps([[f.fact_id, f.text_hash, list(f.ids)] for f in facts if f.fact_id != fact_id]),
                        fp, name))
        rewritten = unreadable = 0
        for turn_id, user_json, reply_json, fact_ids, bare in turns:
            pos, row = len(ids), read_turn_ids(user_json, reply_json, fact_ids, bare)
            if row is None or row.repaired:  # it may hold the fact: cleaned as loading would (turn_rows.py)
                cut, unreadable = pos if cut is None else min(cut, pos), unreadable + 1
                where = (fp, name, turn_id)
                if row is None:
                    db.execute("DELETE FROM chat_turns WHERE fingerprint = ? AND name = ? AND turn_id = ?", where)
                    continue
                ids += _former(user_json, row.user_ids) + row.reply_ids
                db.execute("UPDATE chat_turns SET user_ids = ?, fact_ids = '[]', bare_ids = NULL WHERE "
                           "fingerprint = ? AND name = ? AND turn_id = ?", (json.dumps(row.user_ids), *where))
                continue
            ids += row.user_ids + row.reply_ids
            if row.bare_ids is None or fact_id not in row.fact_ids:
                continue
            cut = pos if cut is None else min(cut, pos)
            rewritten += 1
            db.execute("UPDATE chat_turns SET user_ids = ?, fact_ids = '[]', bare_ids = NULL WHERE "
                       "fingerprint = ? AND name = ? AND turn_id = ?", (bare, fp, name, turn_id))
        if cut is None:
            continue
        cut = cut if head is not None else 0
        files += [(fp, f) for (f,) in db.execute(
            "SELECT file FROM chat_kv WHERE fingerprint = ? AND name = ? AND stop > ?", (fp, name, cut)).fetchall()]
        db.execute("DELETE FROM chat_kv WHERE fingerprint = ? AND name = ? AND stop > ?", (fp, name, cut))
        # other copies of the session (handles, processes) read it again before a turn
        db.execute("UPDATE chat_version SET version = version + 1 WHERE name = ?", (name,))
        changed.append(SessionCut(fp, name, ids, cut, rewritten, unreadable))
    return changed, files


def _former(user_json: str, repaired: list[int]) -> list[int]:
    """A repaired turn's user ids as stored (with its memory block, to find the blocks holding
    it), else as repaired."""
    stored = read_turn_ids(user_json, "[]", "[]", None)
    return repaired if stored is None else stored.user_ids
