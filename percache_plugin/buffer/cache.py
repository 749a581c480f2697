"""A byte-budgeted cache of values under a replacement policy, and a trace-driven simulator."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .policies import Policy, PolicyFactory, make_policy

__all__ = ["BufferCache", "CacheStats", "simulate"]

V = TypeVar("V")


@dataclass
class CacheStats:
    """Counters of one cache: reads served from RAM, reads that went to storage, bytes."""

    hits: int = 0
    misses: int = 0
    bypassed: int = 0
    evictions: int = 0
    invalidations: int = 0
    bytes_hit: int = 0
    bytes_missed: int = 0

    @property
    def hit_ratio(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0


class BufferCache(Generic[V]):
    """Values of known byte size under ``capacity`` bytes; ``policy`` (a policy, or its name in
    ``policies``, by default the built-ins) decides admission and victims. Thread-safe. ``get`` returns the cached value itself (no copy): callers must not
    mutate it."""

    def __init__(self, capacity: int, policy: str | Policy = "llm",
                 policies: Mapping[str, PolicyFactory] | None = None) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be a non-negative int of bytes, got {capacity!r}")
        self.capacity = capacity
        self.policy: Policy = make_policy(policy, capacity, policies) if isinstance(policy, str) else policy
        self.stats = CacheStats()
        self._values: dict[Hashable, tuple[V, int]] = {}
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def __contains__(self, key: Hashable) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def peek(self, key: Hashable) -> V | None:
        """The cached value without counting a hit or telling the policy."""
        entry = self._values.get(key)
        return None if entry is None else entry[0]

    def lookup(self, key: Hashable, cls: str = "") -> V | None:
        """The cached value (counted as a hit) or None (not counted: call :meth:`offer`)."""
        with self._lock:
            entry = self._values.get(key)
            if entry is None:
                return None
            self.policy.hit(key, cls)
            self.stats.hits += 1
            self.stats.bytes_hit += entry[1]
            return entry[0]

    def count_hit(self, size: int) -> None:
        """Count a hit served without an entry (the RAM tier over a store held in memory)."""
        with self._lock:
            self.stats.hits += 1
            self.stats.bytes_hit += size

    def offer(self, key: Hashable, value: V, size: int, cls: str = "") -> bool:
        """After a miss on ``key``: count it and let the policy decide to keep ``value``."""
        with self._lock:
            self.stats.misses += 1
            self.stats.bytes_missed += size
            old = self._values.pop(key, None)
            if old is not None:
                self._used -= old[1]
                self.policy.removed(key)
            victims = self.policy.admit(key, size, cls, self.capacity - self._used)
            if victims is None:
                self.stats.bypassed += 1
                return False
            for v in victims:
                self._evict(v)
                self.stats.evictions += 1
            if self._used + size > self.capacity:  # a policy that under-evicts: refuse, stay in budget
                self.stats.bypassed += 1
                return False
            self._values[key] = (value, size)
            self._used += size
            self.policy.inserted(key, size, cls)
            return True

    def get(self, key: Hashable, load: Callable[[], tuple[V, int]], cls: str = "") -> V:
        """The cached value, or ``load()`` -> (value, size) offered to the cache."""
        hit = self.lookup(key, cls)
        if hit is not None:
            return hit
        value, size = load()
        self.offer(key, value, size, cls)
        return value

    def invalidate(self, key: Hashable) -> bool:
        """Drop ``key`` (a new version exists or it was removed); True if it was cached."""
        with self._lock:
            if key not in self._values:
                return False
            self._evict(key)
            self.stats.invalidations += 1
            return True

    def clear(self) -> None:
        with self._lock:
            for key in list(self._values):
                self._evict(key)

    def _evict(self, key: Hashable) -> None:
        entry = self._values.pop(key, None)
        if entry is not None:
            self._used -= entry[1]
        self.policy.removed(key)


def simulate(accesses: Iterable[tuple[Hashable, int, str]], policy: str, capacity: int) -> CacheStats:
    """Replay ``(key, size, class)`` reads through a cache of ``capacity`` bytes under ``policy``
    (no values are held) and return its counters."""
    cache: BufferCache[None] = BufferCache(capacity, policy)
    marker = object()
    for key, size, cls in accesses:
        if key in cache:
            cache.lookup(key, cls)
        else:
            cache.offer(key, marker, size, cls)  # type: ignore[arg-type]
    return cache.stats
