"""The SQLite side of the K/V store: the ``kv_*`` tables of one fingerprint.

Rows are the single source of truth for what the store holds; files without a row are
leftovers. Every write is a ``BEGIN IMMEDIATE`` transaction, inserts are ``INSERT OR
IGNORE`` (two processes storing the same node: the first row stands), so several
processes and handles can share one database.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from ..sqlite_tx import BUSY_TIMEOUT_S, Database, Schema, connect
from .chunk import NodeInfo, StoreStats, node_info
from .eviction import StoredNode
from .hit_buffer import HitBuffer

__all__ = ["DB_NAME", "KV_SCHEMA", "NODE_COLS", "NodeIndex", "is_write_failure", "layout_of",
           "stored_fingerprints"]

DB_NAME = "percache.sqlite3"
_SCHEMA_VERSION = "1"
_COUNTERS = ("hits", "misses", "corrupt", "evictions", "bytes_loaded", "bytes_written")
KV_SCHEMA = Schema("kv", 1, """
CREATE TABLE IF NOT EXISTS kv_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kv_nodes (
    fingerprint TEXT NOT NULL, key TEXT NOT NULL, parent TEXT,
    n_tokens INTEGER NOT NULL, start INTEGER NOT NULL, nbytes INTEGER NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0, token_hash TEXT NOT NULL, checksum TEXT NOT NULL,
    layout TEXT NOT NULL, created REAL NOT NULL, last_access REAL NOT NULL,
    extra TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (fingerprint, key));
CREATE INDEX IF NOT EXISTS kv_nodes_parent ON kv_nodes (fingerprint, parent);
CREATE INDEX IF NOT EXISTS kv_nodes_tokens ON kv_nodes (fingerprint, token_hash);
CREATE TABLE IF NOT EXISTS kv_counters (
    fingerprint TEXT PRIMARY KEY, hits INTEGER NOT NULL DEFAULT 0,
    misses INTEGER NOT NULL DEFAULT 0, corrupt INTEGER NOT NULL DEFAULT 0,
    evictions INTEGER NOT NULL DEFAULT 0, bytes_loaded INTEGER NOT NULL DEFAULT 0,
    bytes_written INTEGER NOT NULL DEFAULT 0);
""")
log = logging.getLogger(__name__)
NODE_COLS = "key, parent, n_tokens, start, nbytes, hits, token_hash, created, last_access, extra"


class NodeIndex(Database):
    """The rows of one fingerprint in the store's database (``path`` None: in memory).
    Not thread-safe by itself: the store serializes calls."""

    def __init__(self, path: Path | None, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self.pending_hits = HitBuffer()
        self.db = connect(path, KV_SCHEMA)
        try:
            with self.tx():
                row = self.db.execute("SELECT value FROM kv_meta WHERE name = 'schema'").fetchone()
                if row is None:
                    self.db.execute("INSERT INTO kv_meta VALUES ('schema', ?)", (_SCHEMA_VERSION,))
                elif row[0] != _SCHEMA_VERSION:
                    raise ValueError(f"store {path} has kv schema {row[0]}, expected {_SCHEMA_VERSION}")
                self.db.execute("INSERT OR IGNORE INTO kv_counters (fingerprint) VALUES (?)",
                                (fingerprint,))
        except BaseException:
            self.db.close()
            raise

    # -- rows ----------------------------------------------------------------------------
    def row(self, key: str, cols: str) -> tuple | None:
        return self.db.execute(f"SELECT {cols} FROM kv_nodes WHERE fingerprint = ? AND key = ?",
                               (self.fingerprint, key)).fetchone()

    def insert(self, key: str, parent: str | None, n_tokens: int, start: int, nbytes: int,
               token_hash: str, checksum: str, layout: str, extra: str) -> bool:
        """Add a node's row (and its bytes to the counters); False if the key was taken."""
        now = time.time()
        with self.tx():
            inserted = self.db.execute(
                "INSERT OR IGNORE INTO kv_nodes (fingerprint, key, parent, n_tokens, start, nbytes,"
                " token_hash, checksum, layout, created, last_access, extra)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.fingerprint, key, parent, n_tokens, start, nbytes, token_hash, checksum,
                 layout, now, now, extra)).rowcount
            if inserted:
                self.bump(bytes_written=nbytes)
        return bool(inserted)

    def delete(self, keys: Sequence[str], **deltas: int) -> None:
        with self.tx():
            self.db.executemany("DELETE FROM kv_nodes WHERE fingerprint = ? AND key = ?",
                                [(self.fingerprint, k) for k in keys])
            if deltas:
                self.bump(**deltas)

    def touch(self, key: str, nbytes: int) -> None:
        """Count a hit (raises on a read-only or full database: callers treat it as optional)."""
        with self.tx():
            self.db.execute("UPDATE kv_nodes SET hits = hits + 1, last_access = ?"
                            " WHERE fingerprint = ? AND key = ?", (time.time(), self.fingerprint, key))
            self.bump(hits=1, bytes_loaded=nbytes)

    def record_hit(self, key: str) -> bool:
        """Buffer a hit on ``key`` served in front of the store (:class:`~.hit_buffer.HitBuffer`)
        and write the pending ones when due; False if that write failed (see :meth:`flush_hits`)."""
        return not self.pending_hits.add(key) or self.flush_hits()

    def flush_hits(self) -> bool:
        """Add the buffered hits to the nodes' ``hits`` and ``last_access`` in one transaction
        (the store's own counters are left alone: they count reads of the store). Also done
        by :meth:`eviction_nodes` and :meth:`close`. Best-effort: False,
        with a warning, when the database refuses the write (those counts are lost)."""
        pending = self.pending_hits.drain()
        if not pending:
            return True
        try:
            with self.tx():
                self.db.executemany(
                    "UPDATE kv_nodes SET hits = hits + ?, last_access = MAX(last_access, ?)"
                    " WHERE fingerprint = ? AND key = ?",
                    [(n, t, self.fingerprint, k) for k, n, t in pending])
        except Exception as exc:
            if not is_write_failure(exc):
                raise
            log.warning("percache store: counting %d node(s) read from a cache failed (%s: %s)",
                        len(pending), type(exc).__name__, exc)
            return False
        return True

    def close(self) -> None:
        self.flush_hits()
        super().close()

    def bump(self, **deltas: int) -> None:
        sets = ", ".join(f"{name} = {name} + ?" for name in deltas)
        self.db.execute(f"UPDATE kv_counters SET {sets} WHERE fingerprint = ?",
                        (*deltas.values(), self.fingerprint))

    def count(self, **deltas: int) -> None:
        with self.tx():
            self.bump(**deltas)

    # -- queries -------------------------------------------------------------------------
    def all_rows(self) -> list[tuple[str, str]]:
        """(fingerprint, key) of every node of every fingerprint (for the crash sweep)."""
        return self.db.execute("SELECT fingerprint, key FROM kv_nodes").fetchall()

    def delete_any(self, rows: Sequence[tuple[str, str]]) -> None:
        with self.tx():
            self.db.executemany("DELETE FROM kv_nodes WHERE fingerprint = ? AND key = ?", rows)

    def nodes(self, where: str = "", params: tuple = ()) -> list[NodeInfo]:
        rows = self.db.execute(f"SELECT {NODE_COLS} FROM kv_nodes WHERE fingerprint = ?{where}"
                               " ORDER BY created, key", (self.fingerprint, *params)).fetchall()
        return [node_info(r) for r in rows]

    def subtree(self, key: str) -> list[str]:
        return [k for (k,) in self.db.execute(
            "WITH RECURSIVE sub(k) AS (SELECT key FROM kv_nodes WHERE fingerprint = ?1"
            " AND key = ?2 UNION SELECT n.key FROM kv_nodes n JOIN sub ON n.parent = sub.k"
            " WHERE n.fingerprint = ?1) SELECT k FROM sub", (self.fingerprint, key))]

    def reaches(self, start_key: str, target: str) -> bool:
        """Whether walking up the parent chain from ``start_key`` meets ``target``."""
        row = self.db.execute(
            "WITH RECURSIVE up(k) AS (SELECT ?1 UNION SELECT n.parent FROM kv_nodes n JOIN up"
            " ON n.key = up.k WHERE n.fingerprint = ?2 AND n.parent IS NOT NULL)"
            " SELECT 1 FROM up WHERE k = ?3 LIMIT 1", (start_key, self.fingerprint, target)
        ).fetchone()
        return row is not None

    def total_bytes(self) -> int:
        return int(self.db.execute("SELECT COALESCE(SUM(nbytes), 0) FROM kv_nodes"
                                   " WHERE fingerprint = ?", (self.fingerprint,)).fetchone()[0])

    def stats(self) -> StoreStats:
        entries, total = self.db.execute(
            "SELECT COUNT(*), COALESCE(SUM(nbytes), 0) FROM kv_nodes WHERE fingerprint = ?",
            (self.fingerprint,)).fetchone()
        counters = self.db.execute(f"SELECT {', '.join(_COUNTERS)} FROM kv_counters"
                                   " WHERE fingerprint = ?", (self.fingerprint,)).fetchone()
        return StoreStats(entries, total, *(counters or (0,) * len(_COUNTERS)))

    def eviction_nodes(self) -> list[StoredNode]:
        """Every node of this fingerprint, as an eviction policy sees it (buffered hits written first)."""
        self.flush_hits()
        rows = self.db.execute("SELECT key, parent, nbytes, hits, last_access, created"
                               " FROM kv_nodes WHERE fingerprint = ?", (self.fingerprint,)).fetchall()
        return [StoredNode(str(k), None if p is None else str(p), int(b), int(h), float(a), float(c))
                for k, p, b, h, a, c in rows]


def layout_of(layout_json: str) -> list[tuple[str, str, tuple[int, ...]]] | None:
    """A row's recorded tensor layout, or None when the JSON is corrupt."""
    try:
        return [(str(n), str(d), tuple(int(x) for x in s)) for n, d, s in json.loads(layout_json)]
    except (TypeError, ValueError):
        return None


def is_write_failure(exc: BaseException) -> bool:
    """Errors a best-effort write absorbs: the disk, the file system or the database."""
    return isinstance(exc, (OSError, sqlite3.Error))


def stored_fingerprints(root: Path) -> dict[str, int]:
    """Every model fingerprint with K/V nodes in the store at ``root``, and its node count,
    read without opening the store for writing (nothing is created)."""
    db_path = root.expanduser() / DB_NAME
    if not db_path.is_file():
        return {}
    db = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'kv_nodes'").fetchone() is None:
            return {}
        rows = db.execute("SELECT fingerprint, COUNT(*) FROM kv_nodes GROUP BY fingerprint"
                          " ORDER BY fingerprint").fetchall()
        return {str(fp): int(n) for fp, n in rows}
    finally:
        db.close()
