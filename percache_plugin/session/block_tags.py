"""Which session published which prefix block (``chat_blocks``, :data:`.schema.BLOCKS_SCHEMA`),
so that deleting a session or forgetting a fact finds the blocks holding them from the tags
alone: a block's key chains every id before it, so the session's turn rows (which may be
corrupt, or gone with an evicted turn) are not needed to find it.

A block two sessions published (the same system prompt and opening turns, a fork) holds the
conversation of each: it goes with the last of them. A block holding a forgotten fact goes
whoever published it. Each goes from the K/V store of its fingerprint (the caller's
``store_of``) with every node computed after it, then its tags.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from itertools import groupby

from ..kv.store import KVStore
from ..sqlite_tx import connect, transaction
from .schema import BLOCKS_SCHEMA

__all__ = ["BlockTags"]

# The K/V store of a fingerprint (None: there is none, nothing to delete there).
StoreOf = Callable[[str], KVStore | None]


class BlockTags:
    """The tags of one session database (``db``, guarded by ``lock``), or with neither, of a
    handle without a store directory: a private in-memory table, so its sessions' blocks (in
    its in-memory K/V store) go with them too."""

    def __init__(self, db: sqlite3.Connection | None = None, lock: threading.Lock | None = None) -> None:
        self.db = db if db is not None else connect(None, BLOCKS_SCHEMA)
        self._own = db is None
        self.lock = lock if lock is not None else threading.Lock()

    def close(self) -> None:
        if self._own:
            self.db.close()

    def tag(self, fingerprint: str, name: str, blocks: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Record that session ``name`` publishes ``blocks`` (``(key, fact ids held)``), keeping
        the facts an earlier tag of the same key named."""
        with self.lock, transaction(self.db):
            for key, facts in blocks:
                row = self.db.execute("SELECT facts FROM chat_blocks WHERE fingerprint = ? AND name = ? AND key = ?",
                                      (fingerprint, name, key)).fetchone()
                held = sorted(set(facts) | set(_facts(row[0]) or [])) if row is not None else sorted(set(facts))
                self.db.execute("INSERT OR REPLACE INTO chat_blocks VALUES (?, ?, ?, ?)",
                                (fingerprint, name, key, json.dumps(held)))

    def drop_session(self, name: str, store_of: StoreOf) -> int:
        """Delete the blocks session ``name`` published and no other session did (with the nodes
        computed after them), then its tags; returns the nodes deleted."""
        with self.lock:
            rows = self.db.execute(
                "SELECT fingerprint, key FROM chat_blocks AS b WHERE name = ? AND NOT EXISTS (SELECT 1 FROM "
                "chat_blocks AS o WHERE o.fingerprint = b.fingerprint AND o.key = b.key AND o.name != b.name)",
                (name,)).fetchall()
        removed = _delete(rows, store_of)
        with self.lock, transaction(self.db):
            self.db.execute("DELETE FROM chat_blocks WHERE name = ?", (name,))
        return removed

    def drop_fact(self, fact_id: str, store_of: StoreOf) -> int:
        """Delete the blocks holding memory fact ``fact_id`` (a tag whose facts cannot be read
        counts as holding it) with the nodes computed after them, then every tag of those
        blocks, whoever published them; returns the nodes deleted."""
        with self.lock:
            rows = self.db.execute("SELECT fingerprint, key, facts FROM chat_blocks WHERE facts != '[]'").fetchall()
        found = sorted({(fp, key) for fp, key, facts in rows if fact_id in (_facts(facts) or [fact_id])})
        removed = _delete(found, store_of)
        with self.lock, transaction(self.db):
            self.db.executemany("DELETE FROM chat_blocks WHERE fingerprint = ? AND key = ?", found)
        return removed


def _delete(blocks: Sequence[tuple[str, str]], store_of: StoreOf) -> int:
    """Delete the ``(fingerprint, key)`` blocks, each with its subtree, from the K/V store of
    their fingerprint; returns the nodes deleted (a key gone already counts none)."""
    removed = 0
    for fp, keys in groupby(sorted(blocks), key=lambda b: b[0]):
        store = store_of(str(fp))
        if store is not None:
            removed += sum(store.delete(str(key)) for _, key in keys)
    return removed


def _facts(text: str) -> list[str] | None:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return [str(f) for f in value] if isinstance(value, list) else None
