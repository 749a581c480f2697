"""Replacement policies of the buffer caches, and their registry.

A policy only orders what is resident; the cache that owns it (:class:`~.cache.BufferCache`)
counts bytes and asks the policy, on a miss, whether to admit the new entry and which entries to
evict for it. Policies see entries as opaque hashable keys with a byte size and an access class
(``"seq"``, ``"loop"``, ``"hot"`` or ``""`` when undeclared); LRU, LFU and LeCaR ignore the class.

:data:`BUILTIN_POLICIES` names the built-in ones (``"lru"``, ``"lfu"``, ``"lecar"``, ``"llm"``: the
adaptive LLM-aware policy of :mod:`.adaptive`, ``"llm-static"``: its classification alone);
a plugin adds more, per handle, through the ``percache_register_buffer_policies`` hook (the
handle's registry is what ``Config.ram_cache_policy`` names). :func:`make_policy` builds one by
name from such a table.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict
from collections.abc import Callable, Generator, Hashable, Mapping
from types import MappingProxyType
from typing import Protocol

from .adaptive import AdaptiveLLMPolicy
from .llm_aware import LLMAwarePolicy

__all__ = [
    "Policy", "PolicyFactory", "LRUPolicy", "LFUPolicy", "LeCaRPolicy", "BUILTIN_POLICIES", "make_policy",
    "policy_names", "ACCESS_CLASSES",
]

ACCESS_CLASSES: tuple[str, ...] = ("", "seq", "loop", "hot")
"""Access classes: undeclared, one-time sequential, repeated cyclic scan, small hot set."""


class Policy(Protocol):
    """What a buffer cache asks of its replacement policy. ``capacity`` is in bytes."""

    name: str

    def hit(self, key: Hashable, cls: str) -> None:
        """``key`` (resident) was read again."""

    def admit(self, key: Hashable, size: int, cls: str, free: int) -> list[Hashable] | None:
        """A miss on ``key``: the resident keys to evict so it fits (``free`` bytes are free now),
        or None to leave it out of the cache (bypass)."""

    def inserted(self, key: Hashable, size: int, cls: str) -> None:
        """``key`` is now resident."""

    def removed(self, key: Hashable) -> None:
        """``key`` left the cache (evicted by the owner or invalidated)."""


class _Sized:
    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, got {capacity}")
        self.capacity = capacity
        self.sizes: dict[Hashable, int] = {}

    def _evict_until(self, need: int, free: int, order: Callable[[], Hashable | None]) -> list[Hashable] | None:
        if need > self.capacity:
            return None
        victims: list[Hashable] = []
        taken: set[Hashable] = set()
        while free < need:
            v = order()
            if v is None or v in taken:
                return None
            taken.add(v)
            victims.append(v)
            free += self.sizes[v]
        return victims


class LRUPolicy(_Sized):
    """Least recently used."""

    name = "lru"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._order: OrderedDict[Hashable, None] = OrderedDict()

    def order(self) -> list[Hashable]:
        """The resident keys, least recently used first."""
        return list(self._order)

    def hit(self, key: Hashable, cls: str) -> None:
        self._order.move_to_end(key)

    def admit(self, key: Hashable, size: int, cls: str, free: int) -> list[Hashable] | None:
        it = iter(self._order)
        return self._evict_until(size, free, lambda: next(it, None))

    def inserted(self, key: Hashable, size: int, cls: str) -> None:
        self.sizes[key] = size
        self._order[key] = None

    def removed(self, key: Hashable) -> None:
        self.sizes.pop(key, None)
        self._order.pop(key, None)


class LFUPolicy(_Sized):
    """Least frequently used (counts survive eviction: "perfect" LFU); ties go to the least recent.

    The resident keys are ranked through a heap of ``(count, last read, key)`` entries, one pushed
    per read; an entry whose key was read again or left is skipped when it comes up (lazy
    deletion), so a miss costs O(log n) instead of a sort of the resident keys."""

    name = "lfu"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.freq: dict[Hashable, int] = {}
        self._last: dict[Hashable, int] = {}
        self._clock = 0
        self._heap: list[tuple[int, int, Hashable]] = []

    def _touch(self, key: Hashable) -> None:
        self._clock += 1
        self.freq[key] = self.freq.get(key, 0) + 1
        self._last[key] = self._clock
        if key in self.sizes:
            self._push(key)

    def _push(self, key: Hashable) -> None:
        heapq.heappush(self._heap, (self.freq[key], self._last[key], key))
        if len(self._heap) > 2 * len(self.sizes) + 64:  # mostly stale entries: rebuild
            self._heap = [(self.freq[k], self._last[k], k) for k in self.sizes]
            heapq.heapify(self._heap)

    def ranked(self) -> Generator[Hashable, None, None]:
        """The resident keys, least frequently (then least recently) used first, lazily. Close
        the iterator (or exhaust it) so the keys it passed are ranked again."""
        popped: list[tuple[int, int, Hashable]] = []
        try:
            while self._heap:
                entry = heapq.heappop(self._heap)
                f, last, k = entry
                if k in self.sizes and self.freq[k] == f and self._last[k] == last:
                    popped.append(entry)
                    yield k
        finally:
            for entry in popped:
                heapq.heappush(self._heap, entry)

    def hit(self, key: Hashable, cls: str) -> None:
        self._touch(key)

    def admit(self, key: Hashable, size: int, cls: str, free: int) -> list[Hashable] | None:
        self._touch(key)
        ranked = self.ranked()
        try:
            return self._evict_until(size, free, lambda: next(ranked, None))
        finally:
            ranked.close()

    def inserted(self, key: Hashable, size: int, cls: str) -> None:
        self.sizes[key] = size
        self._push(key)

    def removed(self, key: Hashable) -> None:
        self.sizes.pop(key, None)


class LeCaRPolicy(_Sized):
    """LeCaR (Vietri et al., HotStorage'18): LRU and LFU experts weighted by regret.

    Each eviction samples an expert by weight; an evicted key goes to that expert's history. A
    later miss on a key in a history penalises the expert that evicted it (learning rate 0.45,
    discount 0.005^(1/N) per access, N = resident entries). Deterministic for a given ``seed``.
    """

    name = "lecar"

    def __init__(self, capacity: int, *, learning_rate: float = 0.45, seed: int = 0) -> None:
        super().__init__(capacity)
        self._lru = LRUPolicy(capacity)
        self._lfu = LFUPolicy(capacity)
        self._w = [0.5, 0.5]
        self._hist: list[OrderedDict[Hashable, int]] = [OrderedDict(), OrderedDict()]
        self._lr = learning_rate
        self._rng = random.Random(seed)
        self._time = 0

    def hit(self, key: Hashable, cls: str) -> None:
        self._time += 1
        self._lru.hit(key, cls)
        self._lfu.hit(key, cls)

    def admit(self, key: Hashable, size: int, cls: str, free: int) -> list[Hashable] | None:
        self._time += 1
        n = max(1, len(self.sizes))
        discount = 0.005 ** (1.0 / n)
        for i in (0, 1):
            t = self._hist[i].pop(key, None)
            if t is not None:
                self._w[i] *= math.exp(-self._lr * discount ** (self._time - t))
                s = self._w[0] + self._w[1]
                self._w = [self._w[0] / s, self._w[1] / s]
        self._lfu._touch(key)
        if size > self.capacity:
            return None
        victims: list[Hashable] = []
        lru_order = iter(self._lru._order)
        lfu_order = self._lfu.ranked()
        chosen: set[Hashable] = set()
        try:
            while free < size:
                expert = 0 if self._rng.random() < self._w[0] else 1
                source = lru_order if expert == 0 else lfu_order
                v = next((k for k in source if k not in chosen), None)
                if v is None:
                    return None
                chosen.add(v)
                victims.append(v)
                free += self.sizes[v]
                self._hist[expert][v] = self._time
                if len(self._hist[expert]) > n:
                    self._hist[expert].popitem(last=False)
        finally:
            lfu_order.close()
        return victims

    def inserted(self, key: Hashable, size: int, cls: str) -> None:
        self.sizes[key] = size
        self._lru.inserted(key, size, cls)
        self._lfu.inserted(key, size, cls)

    def removed(self, key: Hashable) -> None:
        self.sizes.pop(key, None)
        self._lru.removed(key)
        self._lfu.removed(key)


PolicyFactory = Callable[[int], Policy]
"""Builds a policy for a cache of the given capacity in bytes."""


BUILTIN_POLICIES: Mapping[str, PolicyFactory] = MappingProxyType({
    "llm": AdaptiveLLMPolicy, "llm-static": LLMAwarePolicy, "lru": LRUPolicy, "lfu": LFUPolicy,
    "lecar": LeCaRPolicy,
})
"""The built-in policies by name. A handle's registry (the ``percache_register_buffer_policies``
hook) starts from these; plugins add more or replace them."""


def make_policy(name: str, capacity: int, policies: Mapping[str, PolicyFactory] | None = None) -> Policy:
    """A fresh policy ``name`` from ``policies`` (default: the built-ins) for a cache of
    ``capacity`` bytes; ValueError names the known ones."""
    table = BUILTIN_POLICIES if policies is None else policies
    if name not in table:
        raise ValueError(f"unknown buffer-cache policy {name!r}; known: {policy_names(table)}")
    return table[name](capacity)


def policy_names(policies: Mapping[str, PolicyFactory] | None = None) -> list[str]:
    """The names in ``policies`` (default: the built-ins), sorted."""
    return sorted(BUILTIN_POLICIES if policies is None else policies)
