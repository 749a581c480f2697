"""A RAM tier in front of the K/V store: verified, ready-to-use chunk tensors under a byte budget.

A hit costs no disk read, no checksum and no copy: the tier returns the tensors it holds (the
request's cache takes them as they are and the first forward concatenates them with its new
tokens in the one copy it makes anyway, :func:`~percache_plugin.kv.cache.cache_from_chunks`,
into memory the tier's plugin lends again from request to request, ``Config.ram_join_buffers``).
Callers must not mutate what :meth:`KVRamTier.get` returns.

It never serves stale data. Every entry remembers the version of the store row it was loaded
from (creation time, token hash, size) and every hit compares it with the row now in the store
(one indexed SQLite lookup, which also sees rewrites by other processes sharing the store); a
row that is gone or differs drops the RAM copy and the store is read. The store also tells the
tier of every put and removal (``KVStore.add_listener``), which frees the memory at once.

A hit still counts for the store's own eviction (a node read from RAM all the time is hot, not
cold): it is passed to :meth:`~percache_plugin.kv.store.KVStore.record_hit`, which buffers the
counts in memory and writes them in one transaction (before an eviction, or every few hits).
A store held in memory (``store=None``) already keeps every node's tensors in RAM: the tier
holds no copy of them (it would hold each node twice, up to the whole budget) and serves the
store's own tensors instead, uncopied (``KVStore.get(shared=True)``), counted as hits and as
``shared``; they are current by construction, and bound by the same rule (never mutated).

What :meth:`KVRamTier.get` returns says where it came from (``ChunkKV.origin``: ``"ram"`` or
``"store"``), which the request's stats count.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..kv.integrity import hash_token_ids
from ..kv.store import ChunkKV, KVStore, NodeInfo
from .cache import BufferCache, CacheStats
from .policies import Policy, PolicyFactory
from .trace import Tracer

__all__ = ["KVRamTier"]


@dataclass(frozen=True)
class _Entry:
    kv: ChunkKV
    version: tuple[object, ...]


def _version(info: NodeInfo) -> tuple[float, str, int]:
    return (info.created, info.token_hash, info.nbytes)


class KVRamTier:
    """Chunk K/V of ``store`` cached in RAM under ``capacity`` bytes with ``policy``.

    Access classes: a root node (no parent: the system/persona prefix) is declared ``hot``;
    other nodes are classified online by the policy (a name in ``policies``, by default the
    built-ins). ``tracer`` records every read.

    :meth:`bind` moves the tier to another fingerprint's store (the weights in use changed: a
    LoRA adapter switched, a weight edited) and keeps what it holds, so that turns alternating
    between adapters are served from RAM: entries are keyed by fingerprint and node key, and
    checked against their own store's row as always.
    """

    def __init__(self, store: KVStore, capacity: int, policy: str | Policy = "llm", *,
                 tracer: Tracer | None = None, policies: Mapping[str, PolicyFactory] | None = None) -> None:
        self.cache: BufferCache[_Entry] = BufferCache(capacity, policy, policies)
        self.policy_name = policy if isinstance(policy, str) else policy.name
        self.tracer = tracer
        self.stale = 0
        self.shared = 0  # hits served with an in-memory store's own tensors (nothing held)
        self._pending: list[tuple[KVStore, str, ChunkKV, tuple[object, ...], str]] = []
        self._listeners: dict[int, tuple[KVStore, Callable[[str], None]]] = {}
        self.store = store
        self.bind(store)

    def bind(self, store: KVStore) -> None:
        """Read from ``store`` from now on; what the tier holds for other stores stays (under
        the budget) and listens to their removals."""
        self.store = store
        if id(store) not in self._listeners:
            fp = store.fingerprint

            def forget(key: str) -> None:
                self.cache.invalidate((fp, key))

            store.add_listener(forget)
            self._listeners[id(store)] = (store, forget)

    @property
    def stats(self) -> CacheStats:
        return self.cache.stats

    def get(self, key: str, token_ids: Sequence[int], *, layered: bool = False) -> ChunkKV | None:
        """The node's K/V from RAM if the store still holds that version, else from the store
        (then offered to the cache). None when the store misses or rejects the node.

        ``layered``: a miss may return a chunk still being read (``ChunkKV.pending``); it is
        offered to the cache only once every layer is read and checked, at the next call."""
        self._settle()
        info = self.store.info(key)
        if info is None:  # not stored: the store's own loader counts the miss
            self.invalidate(key)
            return None
        cls = "hot" if info.parent is None else ""
        if self.store.path is None:
            return self._shared(key, token_ids, info.nbytes, cls)
        ck: Hashable = (self.store.fingerprint, key)
        held = self.cache.peek(ck)
        if held is not None:
            if held.version == _version(info) and info.token_hash == hash_token_ids(token_ids):
                self.cache.lookup(ck, cls)
                self.store.record_hit(key)
                self._trace(key, info.nbytes, cls)
                return held.kv
            self.cache.invalidate(ck)
            self.stale += 1
        kv = self.store.get(key, token_ids=token_ids, layered=layered)
        self._trace(key, info.nbytes, cls)
        if kv is None:
            return None
        if kv.row is not None:  # the row the tensors were read with (``info`` may be older)
            info = kv.row
        if kv.pending is not None:
            if kv.nbytes <= self.cache.capacity:  # a larger chunk could never be kept
                self._pending.append((self.store, key, kv, _version(info), cls))
            else:
                self._left_out(kv)
        else:
            self._offer(self.store, key, kv, _version(info), cls)
        return replace(kv, origin="store")

    def get_other(self, key: Hashable, version: tuple[object, ...],
                  load: Callable[[], ChunkKV | None]) -> ChunkKV | None:
        """K/V from another source than the store (a persona head snapshot, always ``hot``):
        the copy held while its source's row is still ``version`` (read by the caller just
        before, ``load`` checking what it reads against it), else ``load()``, kept."""
        held = self.cache.peek(key)
        if held is not None:
            if held.version == version:
                self.cache.lookup(key, "hot")
                return held.kv
            self.cache.invalidate(key)
            self.stale += 1
        kv = load()
        if kv is None:
            return None
        self.cache.offer(key, _Entry(replace(kv, origin="ram", pending=None), version), kv.nbytes, "hot")
        return replace(kv, origin="store")

    def _shared(self, key: str, token_ids: Sequence[int], nbytes: int, cls: str) -> ChunkKV | None:
        """A node of a store held in memory: the store's own tensors, no copy kept."""
        kv = self.store.get(key, token_ids=token_ids, shared=True)
        self._trace(key, nbytes, cls)
        if kv is None:
            return None
        self.shared += 1
        self.cache.count_hit(kv.nbytes)
        return replace(kv, origin="ram")

    def _offer(self, store: KVStore, key: str, kv: ChunkKV, version: tuple[object, ...], cls: str) -> None:
        after = store.info(key)  # the row we read may have been replaced meanwhile
        if after is not None and _version(after) == version:
            self.cache.offer((store.fingerprint, key), _Entry(replace(kv, origin="ram", pending=None), version),
                             kv.nbytes, cls)

    def _left_out(self, kv: ChunkKV) -> None:
        """Count a chunk read from the store that the cache will not be offered."""
        self.stats.misses += 1
        self.stats.bypassed += 1
        self.stats.bytes_missed += kv.nbytes

    def _settle(self, *, final: bool = False) -> None:
        """Offer the chunks read in the background that are now read and checked; forget the
        failed ones (the store dropped them). ``final``: forget those still being read too."""
        waiting = []
        for item in self._pending:
            gate = item[2].pending
            assert gate is not None
            if not gate.finished:
                if final:
                    self._left_out(item[2])
                else:
                    waiting.append(item)
            elif gate.ok:
                self._offer(*item)
        self._pending = waiting

    def settle(self) -> None:
        """The request that read chunks in the background is over: offer those read and
        checked, forget the rest. Until then the tier keeps the chunks it read for the
        request, which the request's cache holds anyway; after it, nothing outside its budget
        (a chunk left waiting for the next request would stay in memory, uncounted, until then)."""
        self._settle(final=True)

    def prefetch(self, keys: Sequence[str]) -> int:
        """Start reading from the store the nodes this tier does not hold (``KVStore.prefetch``);
        a held node whose row changed is read by :meth:`get` without a prefetch."""
        self._settle()
        fp = self.store.fingerprint
        return self.store.prefetch([k for k in keys if self.cache.peek((fp, k)) is None])

    def holds(self, key: str) -> bool:
        """Whether the tier holds a copy of the bound store's ``key`` (checked at the next read)."""
        return (self.store.fingerprint, key) in self.cache

    def invalidate(self, key: str) -> None:
        """Drop the RAM copy of the bound store's ``key``."""
        self.cache.invalidate((self.store.fingerprint, key))

    def close(self) -> None:
        for store, forget in self._listeners.values():
            store.remove_listener(forget)
        self._listeners.clear()
        self.cache.clear()
        self._pending.clear()

    def _trace(self, key: str, nbytes: int, cls: str) -> None:
        if self.tracer is not None:
            self.tracer.record("r", f"kv/{key}", 0, nbytes, cls)
