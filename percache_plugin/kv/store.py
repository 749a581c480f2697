"""Persistent store of chunk-node K/V tensors: safetensors files indexed in SQLite.

Layout (directories 0700, files 0600): ``<path>/percache.sqlite3`` (shared DB, WAL; the
``kv_*`` tables, :mod:`.store_index`) and ``<path>/kv/<fp-tag>/<key>.safetensors``, one file
per node under a directory per fingerprint (:mod:`.node_files`). Write order is file (temp,
fsync, rename, fsync dir) then row, so a crash leaves at worst an orphan or temp file, which
the next lone opener sweeps. Several processes and handles may share a store (``INSERT OR
IGNORE`` rows; file + row changes under an exclusive file lock). Writes are best-effort: a
full disk, a read-only database, a directory at a node's path or the K/V folder deleted under
a live store make ``put`` log, count ``write_errors`` and return False; ``get`` serves K/V
even when its hit counters cannot be written. Eviction follows a policy (:mod:`.eviction`; by
default LFU over leaves), per fingerprint. Tensors live in a backend (:mod:`.node_backends`);
this module keeps rows, limits and counters.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType

import torch

from .checksums import LAYERED_PREFIX, node_checksum
from .chunk import ChunkKV, NodeInfo, StoreStats, check_limit, check_node, node_info, plain
from .eviction import EvictionPolicy, expand_subtrees, lfu_leaves
from .integrity import CorruptNodeError, TensorSpec, hash_token_ids
from .node_backends import FileNodes, MemoryNodes, NodeBackend, NodeRow
from .node_files import NodeFiles
from .store_index import (
    DB_NAME,
    NODE_COLS,
    NodeIndex,
    is_write_failure,
    layout_of,
    stored_fingerprints,
)

__all__ = ["DB_NAME", "ChunkKV", "KVStore", "NodeInfo", "StoreStats", "stored_fingerprints"]

log = logging.getLogger(__name__)


class KVStore:
    """Chunk-node K/V for one model fingerprint, on disk (``path``) or in memory (None).

    ``eviction`` chooses the nodes to drop when over ``byte_limit`` (default
    :func:`~.eviction.lfu_leaves`; the ``percache_register_eviction_policies`` hook names more).
    ``storage_dtype`` casts tensors on ``put`` (e.g. bfloat16 halves the bytes); ``get``
    returns the stored dtype and the caller casts back. ``verify`` checks the CRC32 of the tensor
    bytes on every ``get``. All methods are thread-safe; several stores (in this or other
    processes) may share one directory. ``shared_lock=False``: the caller holds the directory
    lock exclusively (the store admin during a change; nothing is swept)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        fingerprint: str,
        byte_limit: int | None = None,
        storage_dtype: torch.dtype | None = None,
        verify: bool = True,
        eviction: EvictionPolicy = lfu_leaves,
        shared_lock: bool = True,
    ) -> None:
        if not isinstance(fingerprint, str) or not fingerprint:
            raise ValueError(f"fingerprint must be a non-empty string, got {fingerprint!r}")
        if storage_dtype is not None and not isinstance(storage_dtype, torch.dtype):
            raise ValueError(f"storage_dtype must be a torch.dtype or None, got {storage_dtype!r}")
        self.fingerprint = fingerprint
        self.storage_dtype = storage_dtype
        self.verify = verify
        self.eviction = eviction
        self.write_errors = 0
        self._byte_limit = check_limit(byte_limit)
        self._lock = threading.RLock()
        self._closed = False
        self._listeners: list[Callable[[str], None]] = []
        self.path = None if path is None else Path(path).expanduser()
        files = None if self.path is None else NodeFiles(self.path, fingerprint, lock=shared_lock)
        try:
            self._index = NodeIndex(None if self.path is None else self.path / DB_NAME, fingerprint)
        except BaseException:
            if files is not None:
                files.close()
            raise
        self._nodes: NodeBackend = MemoryNodes(self._index) if files is None else FileNodes(self._index, files)
        try:
            if files is not None:
                files.open_shared(self._index.all_rows, self._index.delete_any)
        except BaseException:
            self.close()
            raise

    # -- helpers -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _failed(self, what: str, exc: BaseException) -> None:
        self.write_errors += 1
        log.warning("percache store %s: %s failed (%s: %s); the request goes on without it",
                    self.path or "memory", what, type(exc).__name__, exc)

    def _remove(self, keys: Sequence[str], **deltas: int) -> bool:
        """Delete rows (and counters) in one transaction, then the files; False (counted in
        ``write_errors``) if that failed."""
        if not keys:
            return True
        try:
            self._nodes.remove(keys, deltas, lambda what, exc: self._failed(f"removing {what}", exc))
            self._notify(keys)
            return True
        except Exception as exc:
            if not is_write_failure(exc):
                raise
            self._failed(f"removing {len(keys)} node(s)", exc)
            return False

    def add_listener(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(key)`` whenever this handle writes or removes ``key``. Other processes'
        writes are not seen: a cache in front of the store must still compare row versions."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[str], None]) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def _notify(self, keys: Sequence[str]) -> None:
        for fn in tuple(self._listeners):
            for k in keys:
                fn(k)

    def record_hit(self, key: str) -> None:
        """Count a read of ``key`` served by a cache in front of the store (the RAM tier), so
        eviction sees the node as used; buffered (:meth:`info` may lag), written every 64 hits
        or second, before an eviction, by :meth:`nodes` and :meth:`close`. :meth:`stats` counts
        only reads of the store itself."""
        with self._lock:
            if not self._closed and not self._index.record_hit(key):
                self.write_errors += 1

    def _reject(self, key: str, reason: str) -> None:
        log.warning("percache store: dropping corrupt node %s (%s)", key, reason)
        with self._lock:  # also called from a wait for a layer read in the background
            if not self._closed:
                self._remove([key], misses=1, corrupt=1)

    def _count(self, what: str, write: Callable[[], object]) -> None:
        """Run a counter ``write``; a write failure is logged and counted, not raised."""
        try:
            write()
        except Exception as exc:
            if not is_write_failure(exc):
                raise
            self._failed(what, exc)

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
        """Store a node; False if ``key`` is already stored, the node exceeds the byte limit,
        or the write failed (logged, counted in ``write_errors``; nothing half-written stays).

        Evicts (``self.eviction``; by default LFU leaves) down to the limit afterwards; the new node goes last, and only
        if its ancestors alone fill the limit.
        """
        token_hash, extra_json = check_node(key, kv, parent, start, token_ids, extra)
        n_ids = len(token_ids)
        with self._lock:
            self._check_open()
            if self._index.row(key, "1") is not None:
                return False
            if parent is not None and self._index.reaches(parent, key):
                raise ValueError(f"parent {parent!r} descends from {key!r}: would form a cycle")
            chunk = kv if self.storage_dtype is None else kv.to(self.storage_dtype)
            own = self._nodes.owns_copies  # kept as they are: never alias the caller's
            tensors = {f"k.{i}": plain(t, own) for i, t in enumerate(chunk.keys)}
            tensors.update({f"v.{i}": plain(t, own) for i, t in enumerate(chunk.values)})
            tensor_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
            if self._byte_limit is not None and tensor_bytes > self._byte_limit:
                log.info("percache store: node %s (%d bytes) exceeds the byte limit %d; not stored",
                         key, tensor_bytes, self._byte_limit)
                return False
            layout: list[TensorSpec] = [(n, str(t.dtype), tuple(t.shape)) for n, t in tensors.items()]
            # In memory nothing can rot between put and get: skip the CRC there.
            checksum = "none" if own else node_checksum(tensors, tensors, LAYERED_PREFIX)  # per layer
            row: NodeRow = (parent, n_ids, start, token_hash, checksum, json.dumps(layout), extra_json)
            try:
                inserted = self._nodes.store(key, chunk, tensors, tensor_bytes, layout, row)
            except Exception as exc:
                if not is_write_failure(exc):
                    raise
                self._failed(f"storing node {key}", exc)
                return False
            if not inserted:  # another process stored the same key meanwhile: its row stands
                return False
            self._notify([key])
            self._evict_to_limit(protect=key)
            return self._index.row(key, "1") is not None

    def get(self, key: str, *, token_ids: Sequence[int] | None = None, layered: bool = False,
            shared: bool = False) -> ChunkKV | None:
        """The node's K/V (a fresh copy, stored dtype, CPU, ``ChunkKV.row`` the row read with it) or
        None. ``shared``: in memory, the store's own tensors (never to be mutated), not a copy.

        A node that fails any check (file, header, layout, checksum, fingerprint, token ids,
        its database row) is logged, counted as a miss and as corrupt, and removed;
        descendants are kept. Counting the hit is best-effort (a full disk still reads).
        ``layered``: a node file with per-layer checksums comes back at once, read in the
        background (``ChunkKV.pending``); a layer failing later is dropped and counted alike."""
        want_hash = None if token_ids is None else hash_token_ids(token_ids)
        with self._lock:
            self._check_open()
            row = self._index.row(key, f"{NODE_COLS}, checksum, layout")
            if row is None:
                self._count("counting a miss", lambda: self._index.count(misses=1))
                return None
            info, (checksum, layout_json) = node_info(row[:-2]), row[-2:]
            if want_hash is not None and want_hash != info.token_hash:
                self._reject(key, "token ids do not match")
                return None
            layout = layout_of(layout_json)
            if layout is None:
                self._reject(key, "its database row holds a corrupt tensor layout")
                return None
            try:
                node: NodeRow = (None, info.n_tokens, info.start, info.token_hash, checksum, layout_json, "")
                kv = self._nodes.load(key, layout, node, verify=self.verify, layered=layered, shared=shared,
                                      on_corrupt=lambda why: self._reject(key, why))
            except CorruptNodeError as exc:
                self._reject(key, str(exc))
                return None
            self._count("counting a hit", lambda: self._index.touch(key, info.nbytes))
            return replace(kv, row=info)

    def prefetch(self, keys: Sequence[str]) -> int:
        """Advise the nodes' files ``posix_fadvise(WILLNEED)`` (asynchronous); how many (0 in memory)."""
        self._check_open()
        return self._nodes.prefetch(keys)

    def contains(self, key: str) -> bool:
        """Whether this fingerprint has ``key`` (metadata only; the file is not checked)."""
        with self._lock:
            self._check_open()
            return self._index.row(key, "1") is not None

    def info(self, key: str) -> NodeInfo | None:
        with self._lock:
            self._check_open()
            row = self._index.row(key, NODE_COLS)
            return None if row is None else node_info(row)

    def find_by_tokens(self, token_ids: Sequence[int]) -> list[NodeInfo]:
        """Every node of this fingerprint holding exactly these token ids, wherever it was
        computed (metadata only): the candidates for reuse at a new position."""
        token_hash = hash_token_ids(token_ids)
        with self._lock:
            self._check_open()
            return self._index.nodes(" AND token_hash = ?", (token_hash,))

    def children(self, key: str | None) -> list[NodeInfo]:
        """Direct children of ``key``; ``None`` lists the roots (nodes without a parent)."""
        with self._lock:
            self._check_open()
            return self._index.nodes(" AND parent IS ?", (key,))

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            self._check_open()
            self._index.flush_hits()
            return self._index.nodes()

    def delete(self, key: str, *, with_descendants: bool = True) -> int:
        """Remove ``key`` (and by default its whole subtree); returns the number removed."""
        with self._lock:
            self._check_open()
            keys = self._index.subtree(key) if with_descendants else \
                [key] if self._index.row(key, "1") is not None else []
            return len(keys) if self._remove(keys) else 0

    @property
    def byte_limit(self) -> int | None:
        return self._byte_limit

    def set_byte_limit(self, limit: int | None) -> int:
        """Change the limit and evict down to it now; returns the number of nodes evicted."""
        with self._lock:
            self._check_open()
            self._byte_limit = check_limit(limit)
            return self._evict_to_limit(protect=None)

    def total_bytes(self) -> int:
        with self._lock:
            self._check_open()
            return self._index.total_bytes()

    def stats(self) -> StoreStats:
        with self._lock:
            self._check_open()
            stats = self._index.stats()
            stats.write_errors = self.write_errors
            return stats

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._index.close()
            self._nodes.close()

    def __enter__(self) -> KVStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self.path is None else str(self.path)
        return f"KVStore({where!r}, fingerprint={self.fingerprint!r}, byte_limit={self._byte_limit})"

    # -- internals -----------------------------------------------------------------------
    def _evict_to_limit(self, protect: str | None) -> int:
        if self._byte_limit is None:
            return 0
        nodes = self._index.eviction_nodes()
        if sum(n.nbytes for n in nodes) <= self._byte_limit:
            return 0
        victims = expand_subtrees(self.eviction(nodes, self._byte_limit, protect), nodes)
        if victims:
            log.debug("percache store: evicting %d node(s) to reach %d bytes", len(victims), self._byte_limit)
            if not self._remove(victims, evictions=len(victims)):
                return 0
        return len(victims)
