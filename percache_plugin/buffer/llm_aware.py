"""The LLM-aware replacement policy (after Algorithm 1 of "Rethinking I/O caching for LLM
inference on resource-constrained mobile platforms"), adapted to byte-sized entries.

Every key is classified online from its reuse distance (distinct keys read since its last read,
approximated by the accesses in between), unless its access class is declared:

- ``seq``: read once so far (a one-time sequential scan, e.g. start-up, population writes):
  cached only in free space and evicted first.
- ``hot``: re-read within ``hot_share`` of the capacity in bytes of other reads (a small set read all the time,
  e.g. the system/persona prefix, the active session): an LRU area of up to ``hot_share`` of
  the capacity, reserved against loop blocks.
- ``loop``: re-read after a longer scan (a loop over weight files, or over stored K/V): pinned,
  shortest loops first and lowest blocks of a loop first, so an N-block loop with S pinned blocks
  gets S hits per cycle where LRU gets none. A loop block is admitted only by evicting a loop
  block ranked after it.

The block number of a key is the order in which it was first read, which is the scan order of
the loop it belongs to.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from itertools import chain

__all__ = ["LLMAwarePolicy"]


class LLMAwarePolicy:
    """SEQ / LOOP / HOT classification with loop pinning and a reserved hot area."""

    name = "llm-static"

    def __init__(self, capacity: int, *, hot_share: float = 0.25, use_declared: bool = True) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, got {capacity}")
        if not 0.0 <= hot_share <= 1.0:
            raise ValueError(f"hot_share must be in [0, 1], got {hot_share}")
        self.capacity = capacity
        self.hot_share = hot_share
        self.hot_distance = int(hot_share * capacity)
        self.use_declared = use_declared
        self.sizes: dict[Hashable, int] = {}
        self._cls: dict[Hashable, str] = {}
        self._block: dict[Hashable, int] = {}
        self._loop_len: dict[Hashable, int] = {}
        self._last_bytes: dict[Hashable, int] = {}
        self._first_bytes: dict[Hashable, int] = {}
        self._reads: dict[Hashable, int] = {}
        self._bytes_read = 0
        self._seq: OrderedDict[Hashable, None] = OrderedDict()
        self._hot: OrderedDict[Hashable, None] = OrderedDict()
        # insertion-ordered (not a set): expired loop blocks go in a fixed order, whatever
        # the hash seed, so a replay gives the same hit ratio in every process
        self._loop: dict[Hashable, None] = {}
        self._hot_bytes = 0
        self._pending = "seq"

    # -- classification --------------------------------------------------------------------

    def classify(self, key: Hashable, size: int, declared: str) -> str:
        """Record a read of ``key`` and return its class."""
        if key not in self._block:
            self._block[key] = len(self._block)
            self._first_bytes[key] = self._bytes_read + size
        last = self._last_bytes.get(key)
        distance = None if last is None else self._bytes_read - last
        self._bytes_read += size
        self._last_bytes[key] = self._bytes_read
        if self.use_declared and declared in ("seq", "hot", "loop"):
            cls = declared
            if declared == "loop" and distance is not None:
                self._note_distance(key, distance)
        elif distance is None:
            cls = "seq"
        elif distance <= self.hot_distance:
            cls = "hot"
        else:
            cls = "loop"
            self._note_distance(key, distance)
        if cls == "loop" and key not in self._loop_len:
            self._loop_len[key] = 1 << 62  # a declared loop seen once: rank after known loops
        return cls

    def _note_distance(self, key: Hashable, distance: int) -> None:
        """Loop length = mean reuse distance since the first read (steady for a fixed loop)."""
        self._reads[key] = self._reads.get(key, 1) + 1
        span = self._last_bytes[key] - self._first_bytes[key]
        self._loop_len[key] = max(1, span // (self._reads[key] - 1))

    def _expired(self, key: Hashable) -> bool:
        """A loop block not read for twice its loop length: its loop has ended."""
        return self._bytes_read - self._last_bytes[key] > 2 * self._loop_len.get(key, 1 << 62)

    def _rank(self, key: Hashable) -> tuple[int, int]:
        return (self._loop_len.get(key, 1 << 62), self._block[key])

    # -- Policy protocol -------------------------------------------------------------------

    def hit(self, key: Hashable, cls: str) -> None:
        new = self.classify(key, self.sizes[key], cls)
        old = self._cls[key]
        if new != old:
            self._drop(key)
            self._place(key, new)
        elif new == "hot":
            self._hot.move_to_end(key)
        elif new == "seq":
            self._seq.move_to_end(key)

    def admit(self, key: Hashable, size: int, cls: str, free: int) -> list[Hashable] | None:
        cls = self.classify(key, size, cls)
        self._pending = cls
        if size > self.capacity:
            return None
        victims: list[Hashable] = []
        seq = chain(self._seq, (k for k in self._loop if self._expired(k)))  # lazily
        while free < size:  # sequential blocks go first, whatever comes in
            v = next(seq, None)
            if v is None:
                break
            victims.append(v)
            free += self.sizes[v]
        if free >= size:
            return victims
        if cls == "seq":
            return None  # sequential: opportunistic only
        loops = sorted((k for k in self._loop if k not in victims), key=self._rank, reverse=True)
        if cls == "hot":
            reserve = self.hot_share * self.capacity
            hot = iter(self._hot)
            if self._hot_bytes + size <= reserve:
                it = iter(loops)
                while free < size:
                    v = next(it, None)
                    if v is None:
                        break
                    victims.append(v)
                    free += self.sizes[v]
            while free < size:
                v = next(hot, None)
                if v is None:
                    break
                victims.append(v)
                free += self.sizes[v]
            if free < size:
                for v in loops:
                    if v in victims:
                        continue
                    victims.append(v)
                    free += self.sizes[v]
                    if free >= size:
                        break
            return victims if free >= size else None
        # loop: evict only loop blocks ranked after this one; hot blocks above their reserve
        rank = self._rank(key)
        for v in loops:
            if free >= size:
                break
            if self._rank(v) <= rank:
                break
            victims.append(v)
            free += self.sizes[v]
        if free < size and self._hot_bytes > self.hot_share * self.capacity:
            excess = self._hot_bytes - self.hot_share * self.capacity
            for v in self._hot:
                if free >= size or excess <= 0:
                    break
                victims.append(v)
                free += self.sizes[v]
                excess -= self.sizes[v]
        return victims if free >= size else None

    def inserted(self, key: Hashable, size: int, cls: str) -> None:
        self.sizes[key] = size
        self._place(key, self._pending)

    def removed(self, key: Hashable) -> None:
        if key in self.sizes:
            self._drop(key)
            del self.sizes[key]

    # -- internals -------------------------------------------------------------------------

    def _place(self, key: Hashable, cls: str) -> None:
        self._cls[key] = cls
        if cls == "hot":
            self._hot[key] = None
            self._hot_bytes += self.sizes[key]
        elif cls == "loop":
            self._loop[key] = None
        else:
            self._seq[key] = None

    def _drop(self, key: Hashable) -> None:
        cls = self._cls.pop(key, "seq")
        if cls == "hot":
            self._hot.pop(key, None)
            self._hot_bytes -= self.sizes[key]
        elif cls == "loop":
            self._loop.pop(key, None)
        else:
            self._seq.pop(key, None)
