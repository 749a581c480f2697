"""Persistent store of chunk-node K/V tensors: safetensors files indexed in SQLite.

Layout of a store directory (mode 0700)::

    <path>/percache.sqlite3            shared DB (WAL); this module owns the ``kv_*`` tables
    <path>/kv/<fp-tag>/<key>.safetensors   one file per node, ``fp-tag`` = hash of the fingerprint

Files live under a per-fingerprint directory so two models sharing a store can use the
same key without overwriting each other's file; every SQLite lookup filters by the
fingerprint too. Write order is file (temp, fsync, rename, fsync dir) then row, so a
crash leaves at worst an orphan file or temp file, which the next open sweeps.

Eviction is LFU over leaves only, per fingerprint. A node larger than the whole byte
limit is refused by ``put`` (returns False, nothing written).
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import torch

from ..sqlite_tx import transaction
from .integrity import (
    FORMAT,
    CorruptNodeError,
    DirectoryLock,
    TensorSpec,
    checksum_tensors,
    fsync_dir,
    hash_token_ids,
    make_store_dirs,
    node_path,
    read_node_file,
    sweep_files,
    validate_key,
    write_node_file,
)

__all__ = ["ChunkKV", "KVStore", "NodeInfo", "StoreStats", "stored_fingerprints"]

log = logging.getLogger(__name__)

DB_NAME = "percache.sqlite3"
_SCHEMA_VERSION = "1"
_BUSY_TIMEOUT_MS = 10_000
_COUNTERS = ("hits", "misses", "corrupt", "evictions", "bytes_loaded", "bytes_written")
_SCHEMA = """
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
CREATE INDEX IF NOT EXISTS kv_nodes_tokens ON kv_nodes (fingerprint, token_hash);
CREATE TABLE IF NOT EXISTS kv_counters (
    fingerprint TEXT PRIMARY KEY, hits INTEGER NOT NULL DEFAULT 0,
    misses INTEGER NOT NULL DEFAULT 0, corrupt INTEGER NOT NULL DEFAULT 0,
    evictions INTEGER NOT NULL DEFAULT 0, bytes_loaded INTEGER NOT NULL DEFAULT 0,
    bytes_written INTEGER NOT NULL DEFAULT 0);
"""
_NODE_COLS = "key, parent, n_tokens, start, nbytes, hits, token_hash, created, last_access, extra"


@dataclass(frozen=True)
class ChunkKV:
    """K/V of one chunk: per layer ``[kv_heads, n_tokens, head_dim]`` (post-RoPE, no batch)."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "values", tuple(self.values))
        if not self.keys or len(self.keys) != len(self.values):
            raise ValueError(
                f"ChunkKV needs the same non-zero number of key and value layers, "
                f"got {len(self.keys)} and {len(self.values)}"
            )
        lengths = set()
        for kind, tensors in (("keys", self.keys), ("values", self.values)):
            for layer, t in enumerate(tensors):
                if not isinstance(t, torch.Tensor) or t.dim() != 3:
                    shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                    raise ValueError(
                        f"ChunkKV {kind}[{layer}] must be a 3-D tensor "
                        f"[kv_heads, n_tokens, head_dim], got {shape}"
                    )
                lengths.add(t.shape[1])
        if len(lengths) != 1:
            raise ValueError(f"ChunkKV layers disagree on n_tokens: {sorted(lengths)}")

    @property
    def n_tokens(self) -> int:
        return int(self.keys[0].shape[1])

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def to(self, dtype: torch.dtype) -> ChunkKV:
        """Same chunk cast to ``dtype`` (tensors already in ``dtype`` are not copied)."""
        return ChunkKV(
            tuple(t.to(dtype) for t in self.keys), tuple(t.to(dtype) for t in self.values)
        )


@dataclass(frozen=True)
class NodeInfo:
    """A node's metadata. ``nbytes`` is its file size (tensor bytes for in-memory stores)."""

    key: str
    parent: str | None
    n_tokens: int
    start: int
    nbytes: int
    hits: int
    token_hash: str
    created: float
    last_access: float
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class StoreStats:
    """Counters of one fingerprint; persisted with the store."""

    entries: int
    bytes: int
    hits: int
    misses: int
    corrupt: int
    evictions: int
    bytes_loaded: int
    bytes_written: int


def _node_info(row: tuple) -> NodeInfo:
    key, parent, n_tokens, start, nbytes, hits, token_hash, created, last_access, extra = row
    return NodeInfo(key, parent, n_tokens, start, nbytes, hits, token_hash, created,
                    last_access, json.loads(extra))


class KVStore:
    """Chunk-node K/V for one model fingerprint, on disk (``path``) or in memory (None).

    ``storage_dtype`` casts tensors on ``put`` (e.g. bfloat16 halves the bytes); ``get``
    returns the stored dtype and the caller casts back. ``verify`` checks the CRC32 of
    the tensor bytes on every ``get``. All methods are thread-safe.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        fingerprint: str,
        byte_limit: int | None = None,
        storage_dtype: torch.dtype | None = None,
        verify: bool = True,
    ) -> None:
        if not isinstance(fingerprint, str) or not fingerprint:
            raise ValueError(f"fingerprint must be a non-empty string, got {fingerprint!r}")
        if storage_dtype is not None and not isinstance(storage_dtype, torch.dtype):
            raise ValueError(f"storage_dtype must be a torch.dtype or None, got {storage_dtype!r}")
        self.fingerprint = fingerprint
        self.storage_dtype = storage_dtype
        self.verify = verify
        self._byte_limit = _check_limit(byte_limit)
        self._lock = threading.RLock()
        self._closed = False
        self._memory: dict[str, ChunkKV] | None = None
        self._dir_lock: DirectoryLock | None = None
        self.path: Path | None = None
        self._dir: Path | None = None
        if path is None:
            self._memory = {}
            self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        else:
            self.path = Path(path).expanduser()
            self._dir = make_store_dirs(self.path, self.fingerprint)
            self._db = self._connect()
        try:
            self._db.executescript(_SCHEMA)
            with self._tx():
                self._check_schema()
                self._db.execute("INSERT OR IGNORE INTO kv_counters (fingerprint) VALUES (?)",
                                 (fingerprint,))
            if self.path is not None:
                self._dir_lock = DirectoryLock(self.path / "kv")
                if self._dir_lock.exclusive:  # no other live store: leftovers are a crash's
                    try:
                        self._sweep()
                    finally:
                        self._dir_lock.share()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        assert self.path is not None
        db_path = self.path / DB_NAME
        try:
            db = sqlite3.connect(db_path, timeout=_BUSY_TIMEOUT_MS / 1000,
                                 check_same_thread=False, isolation_level=None)
            db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA journal_mode = WAL")
            # WAL + NORMAL: a process crash loses nothing committed; power loss may drop the
            # last commits, which only orphans files the next open sweeps.
            db.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise PermissionError(f"cannot open store database {str(db_path)!r}: {exc}") from None
        return db

    def _check_schema(self) -> None:
        row = self._db.execute("SELECT value FROM kv_meta WHERE name = 'schema'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO kv_meta VALUES ('schema', ?)", (_SCHEMA_VERSION,))
        elif row[0] != _SCHEMA_VERSION:
            raise ValueError(f"store {self.path} has kv schema {row[0]}, expected {_SCHEMA_VERSION}")

    def _sweep(self) -> None:
        """Remove what a crash can leave: temp files, files without a row, rows without a file."""
        assert self.path is not None
        kv_root = self.path / "kv"
        rows = self._db.execute("SELECT fingerprint, key FROM kv_nodes").fetchall()
        paths = {(fp, key): node_path(kv_root, fp, key) for fp, key in rows}
        removed_files = sweep_files(kv_root, keep=set(paths.values()))
        lost = [row for row, path in paths.items() if not path.is_file()]
        if lost:
            with self._tx():
                self._db.executemany("DELETE FROM kv_nodes WHERE fingerprint = ? AND key = ?", lost)
        if removed_files or lost:
            log.warning("percache store %s: swept %d leftover file(s) and %d row(s) without a file",
                        self.path, removed_files, len(lost))

    # -- helpers -------------------------------------------------------------------------

    def _tx(self) -> AbstractContextManager[None]:
        return transaction(self._db)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _file(self, key: str) -> Path:
        assert self.path is not None
        return node_path(self.path / "kv", self.fingerprint, key)

    def _bump(self, **deltas: int) -> None:
        sets = ", ".join(f"{name} = {name} + ?" for name in deltas)
        self._db.execute(f"UPDATE kv_counters SET {sets} WHERE fingerprint = ?",
                         (*deltas.values(), self.fingerprint))

    def _row(self, key: str, cols: str) -> tuple | None:
        return self._db.execute(f"SELECT {cols} FROM kv_nodes WHERE fingerprint = ? AND key = ?",
                                (self.fingerprint, key)).fetchone()

    def _remove(self, keys: Sequence[str], **deltas: int) -> None:
        """Delete rows (and counters) in one transaction, then the files."""
        with self._tx():
            self._db.executemany("DELETE FROM kv_nodes WHERE fingerprint = ? AND key = ?",
                                 [(self.fingerprint, k) for k in keys])
            if deltas:
                self._bump(**deltas)
        for k in keys:
            if self._memory is not None:
                self._memory.pop(k, None)
            else:
                self._file(k).unlink(missing_ok=True)
        if self._dir is not None and keys:
            fsync_dir(self._dir)

    def _reject(self, key: str, reason: str) -> None:
        log.warning("percache store: dropping corrupt node %s (%s)", key, reason)
        self._remove([key], misses=1, corrupt=1)

    # -- public API ----------------------------------------------------------------------

    def put(
        self,
        key: str,
        kv: ChunkKV,
        *,
        parent: str | None,
        start: int,
        token_ids: Sequence[int],
        extra: Mapping[str, str] | None = None,
    ) -> bool:
        """Store a node; False if ``key`` is already stored or the node exceeds the byte limit.

        Evicts (LFU leaves) down to the limit afterwards; the new node goes last, and only
        if its ancestors alone fill the limit.
        """
        validate_key(key)
        if parent is not None and validate_key(parent, "parent") == key:
            raise ValueError(f"node {key!r} cannot be its own parent")
        if not isinstance(kv, ChunkKV):
            raise ValueError(f"kv must be a ChunkKV, got {type(kv).__name__}")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise ValueError(f"start must be a non-negative int, got {start!r}")
        token_hash = hash_token_ids(token_ids)
        n_ids = len(token_ids)
        if n_ids != kv.n_tokens or n_ids == 0:
            raise ValueError(f"node {key!r}: {n_ids} token ids for {kv.n_tokens} K/V positions "
                             "(must be equal and non-zero)")
        extra_json = json.dumps(_check_extra(extra), sort_keys=True)
        with self._lock:
            self._check_open()
            if self._row(key, "1") is not None:
                return False
            if parent is not None and self._reaches(parent, key):
                raise ValueError(f"parent {parent!r} descends from {key!r}: would form a cycle")
            chunk = kv if self.storage_dtype is None else kv.to(self.storage_dtype)
            own = self._memory is not None  # the dict keeps them: never alias the caller's
            tensors = {f"k.{i}": _plain(t, own) for i, t in enumerate(chunk.keys)}
            tensors.update({f"v.{i}": _plain(t, own) for i, t in enumerate(chunk.values)})
            tensor_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
            if self._byte_limit is not None and tensor_bytes > self._byte_limit:
                log.info("percache store: node %s (%d bytes) exceeds the byte limit %d; not stored",
                         key, tensor_bytes, self._byte_limit)
                return False
            layout: list[TensorSpec] = [(n, str(t.dtype), tuple(t.shape)) for n, t in tensors.items()]
            # In memory nothing can rot between put and get: skip the CRC there.
            checksum = "none" if own else checksum_tensors(tensors.values())
            if self._memory is not None:
                nbytes = tensor_bytes
                self._memory[key] = ChunkKV(
                    tuple(tensors[f"k.{i}"] for i in range(len(chunk.keys))),
                    tuple(tensors[f"v.{i}"] for i in range(len(chunk.values))))
            else:
                meta = self._file_metadata(key, token_hash, start, n_ids, checksum)
                meta["dtype"] = layout[0][1]
                nbytes = write_node_file(self._file(key), tensors, meta)
            now = time.time()
            try:
                with self._tx():
                    inserted = self._db.execute(
                        "INSERT OR IGNORE INTO kv_nodes (fingerprint, key, parent, n_tokens, start, nbytes,"
                        " token_hash, checksum, layout, created, last_access, extra)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (self.fingerprint, key, parent, n_ids, start, nbytes, token_hash,
                         checksum, json.dumps(layout), now, now, extra_json)).rowcount
                    self._bump(bytes_written=nbytes)
            except BaseException:
                if self._memory is not None:
                    self._memory.pop(key, None)
                else:
                    self._file(key).unlink(missing_ok=True)
                raise
            if not inserted:  # another process stored the same key meanwhile: its row stands
                return False
            self._evict_to_limit(protect=key)
            return self._row(key, "1") is not None

    def get(self, key: str, *, token_ids: Sequence[int] | None = None) -> ChunkKV | None:
        """The node's K/V (a fresh copy, stored dtype, CPU), or None on a miss.

        A node that fails any check (file, header, layout, checksum, fingerprint, token ids)
        is logged, counted as a miss and as corrupt, and removed; descendants are kept.
        """
        want_hash = None if token_ids is None else hash_token_ids(token_ids)
        with self._lock:
            self._check_open()
            row = self._row(key, "token_hash, checksum, layout, start, n_tokens, nbytes")
            if row is None:
                with self._tx():
                    self._bump(misses=1)
                return None
            token_hash, checksum, layout_json, start, n_tokens, nbytes = row
            if want_hash is not None and want_hash != token_hash:
                self._reject(key, "token ids do not match")
                return None
            layout = [(n, d, tuple(s)) for n, d, s in json.loads(layout_json)]
            if self._memory is not None:
                stored = self._memory.get(key)
                if stored is None:
                    self._reject(key, "tensors missing from memory")
                    return None
                kv = ChunkKV(tuple(t.clone() for t in stored.keys),
                             tuple(t.clone() for t in stored.values))
            else:
                meta = self._file_metadata(key, token_hash, start, n_tokens, checksum)
                try:
                    tensors = read_node_file(self._file(key), expected_metadata=meta, layout=layout,
                                             checksum=checksum if self.verify else None)
                except CorruptNodeError as exc:
                    self._reject(key, str(exc))
                    return None
                n_layers = sum(1 for n, _, _ in layout if n.startswith("k."))
                kv = ChunkKV(tuple(tensors[f"k.{i}"] for i in range(n_layers)),
                             tuple(tensors[f"v.{i}"] for i in range(n_layers)))
            with self._tx():
                self._db.execute("UPDATE kv_nodes SET hits = hits + 1, last_access = ?"
                                 " WHERE fingerprint = ? AND key = ?",
                                 (time.time(), self.fingerprint, key))
                self._bump(hits=1, bytes_loaded=nbytes)
            return kv

    def contains(self, key: str) -> bool:
        """Whether this fingerprint has ``key`` (metadata only; the file is not checked)."""
        with self._lock:
            self._check_open()
            return self._row(key, "1") is not None

    def info(self, key: str) -> NodeInfo | None:
        with self._lock:
            self._check_open()
            row = self._row(key, _NODE_COLS)
            return None if row is None else _node_info(row)

    def find_by_tokens(self, token_ids: Sequence[int]) -> list[NodeInfo]:
        """Every node of this fingerprint holding exactly these token ids, wherever it was
        computed (metadata only): the candidates for reuse at a new position."""
        token_hash = hash_token_ids(token_ids)
        with self._lock:
            self._check_open()
            rows = self._db.execute(
                f"SELECT {_NODE_COLS} FROM kv_nodes WHERE fingerprint = ? AND token_hash = ?"
                " ORDER BY created, key", (self.fingerprint, token_hash)).fetchall()
            return [_node_info(r) for r in rows]

    def children(self, key: str | None) -> list[NodeInfo]:
        """Direct children of ``key``; ``None`` lists the roots (nodes without a parent)."""
        with self._lock:
            self._check_open()
            rows = self._db.execute(
                f"SELECT {_NODE_COLS} FROM kv_nodes WHERE fingerprint = ? AND parent IS ?"
                " ORDER BY created, key", (self.fingerprint, key)).fetchall()
            return [_node_info(r) for r in rows]

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            self._check_open()
            rows = self._db.execute(f"SELECT {_NODE_COLS} FROM kv_nodes WHERE fingerprint = ?"
                                    " ORDER BY created, key", (self.fingerprint,)).fetchall()
            return [_node_info(r) for r in rows]

    def delete(self, key: str, *, with_descendants: bool = True) -> int:
        """Remove ``key`` (and by default its whole subtree); returns the number removed."""
        with self._lock:
            self._check_open()
            if with_descendants:
                keys = [k for (k,) in self._db.execute(
                    "WITH RECURSIVE sub(k) AS (SELECT key FROM kv_nodes WHERE fingerprint = ?1"
                    " AND key = ?2 UNION SELECT n.key FROM kv_nodes n JOIN sub ON n.parent = sub.k"
                    " WHERE n.fingerprint = ?1) SELECT k FROM sub", (self.fingerprint, key))]
            else:
                keys = [key] if self._row(key, "1") is not None else []
            self._remove(keys)
            return len(keys)

    @property
    def byte_limit(self) -> int | None:
        return self._byte_limit

    def set_byte_limit(self, limit: int | None) -> int:
        """Change the limit and evict down to it now; returns the number of nodes evicted."""
        with self._lock:
            self._check_open()
            self._byte_limit = _check_limit(limit)
            return self._evict_to_limit(protect=None)

    def total_bytes(self) -> int:
        with self._lock:
            self._check_open()
            return int(self._db.execute("SELECT COALESCE(SUM(nbytes), 0) FROM kv_nodes"
                                        " WHERE fingerprint = ?", (self.fingerprint,)).fetchone()[0])

    def stats(self) -> StoreStats:
        with self._lock:
            self._check_open()
            entries, total = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(nbytes), 0) FROM kv_nodes WHERE fingerprint = ?",
                (self.fingerprint,)).fetchone()
            counters = self._db.execute(f"SELECT {', '.join(_COUNTERS)} FROM kv_counters"
                                        " WHERE fingerprint = ?", (self.fingerprint,)).fetchone()
            return StoreStats(entries, total, *counters)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._db.close()
            if self._dir_lock is not None:
                self._dir_lock.close()

    def __enter__(self) -> KVStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self.path is None else str(self.path)
        return f"KVStore({where!r}, fingerprint={self.fingerprint!r}, byte_limit={self._byte_limit})"

    # -- internals -----------------------------------------------------------------------

    def _file_metadata(self, key: str, token_hash: str, start: int, n_tokens: int,
                       checksum: str) -> dict[str, str]:
        return {"format": FORMAT, "fingerprint": self.fingerprint, "key": key,
                "token_hash": token_hash, "start": str(start), "n_tokens": str(n_tokens),
                "checksum": checksum}

    def _reaches(self, start_key: str, target: str) -> bool:
        """Whether walking up the parent chain from ``start_key`` meets ``target``."""
        row = self._db.execute(
            "WITH RECURSIVE up(k) AS (SELECT ?1 UNION SELECT n.parent FROM kv_nodes n JOIN up"
            " ON n.key = up.k WHERE n.fingerprint = ?2 AND n.parent IS NOT NULL)"
            " SELECT 1 FROM up WHERE k = ?3 LIMIT 1", (start_key, self.fingerprint, target)
        ).fetchone()
        return row is not None

    def _evict_to_limit(self, protect: str | None) -> int:
        """LFU over leaves (fewest hits, then oldest access) until under the byte limit."""
        limit = self._byte_limit
        if limit is None:
            return 0
        rows = self._db.execute("SELECT key, parent, nbytes, hits, last_access, created"
                                " FROM kv_nodes WHERE fingerprint = ?", (self.fingerprint,)).fetchall()
        total = sum(r[2] for r in rows)
        if total <= limit:
            return 0
        by_key = {r[0]: r for r in rows}
        n_children = Counter(r[1] for r in rows if r[1] in by_key)
        heap = [(r[3], r[4], r[5], r[0]) for r in rows
                if n_children[r[0]] == 0 and r[0] != protect]
        heapq.heapify(heap)
        victims: list[str] = []
        while total > limit and heap:
            key = heapq.heappop(heap)[3]
            victims.append(key)
            total -= by_key[key][2]
            parent = by_key[key][1]
            if parent in by_key:
                n_children[parent] -= 1
                if n_children[parent] == 0 and parent != protect:
                    p = by_key[parent]
                    heapq.heappush(heap, (p[3], p[4], p[5], p[0]))
        if total > limit and protect in by_key and n_children[protect] == 0:
            victims.append(protect)  # its own ancestors fill the limit
        if victims:
            log.debug("percache store: evicting %d node(s) to reach %d bytes", len(victims), limit)
            self._remove(victims, evictions=len(victims))
        return len(victims)


def _plain(t: torch.Tensor, own: bool) -> torch.Tensor:
    """A contiguous CPU tensor; with ``own``, never sharing memory with ``t``."""
    t = t.detach()
    out = t.to("cpu").contiguous()
    return out.clone() if own and out.data_ptr() == t.data_ptr() else out


def _check_limit(limit: int | None) -> int | None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"byte_limit must be a non-negative int or None, got {limit!r}")
    return limit


def _check_extra(extra: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(extra or {})
    for k, v in out.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"extra must map str to str, got {k!r}: {v!r}")
    return out


def stored_fingerprints(path: str | os.PathLike[str]) -> dict[str, int]:
    """Every model fingerprint with K/V nodes in the store at ``path``, and its node count,
    read without opening the store for writing (nothing is created)."""
    db_path = Path(path).expanduser() / DB_NAME
    if not db_path.is_file():
        return {}
    db = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True, timeout=_BUSY_TIMEOUT_MS / 1000)
    try:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'kv_nodes'").fetchone() is None:
            return {}
        rows = db.execute("SELECT fingerprint, COUNT(*) FROM kv_nodes GROUP BY fingerprint"
                          " ORDER BY fingerprint").fetchall()
        return {str(fp): int(n) for fp, n in rows}
    finally:
        db.close()
