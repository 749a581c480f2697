"""The adaptive LLM-aware policy: the seed's classification (:class:`~.llm_aware.LLMAwarePolicy`)
with a fall-back to recency, frequency or a learnt mix of both where those do better, learnt online.

Four experts run side by side on metadata only (each keeps the key set it would hold in a cache
of the same capacity, no values): the LLM-aware policy (SEQ/LOOP/HOT classes, loop pinning, a
reserved hot area), LRU, LFU and LeCaR (LRU and LFU weighted by regret, which beats both, and the
classification, on some mixes: the kv-chat trace at 40-50% of its blocks). Every read is
replayed through all four, and each earns a decayed count of its hits (half-life ``half_life``
reads). The real cache follows the expert with the most: a missed key is admitted only if that
expert holds it now, and the victims are the resident keys that expert does not hold, those the
fewest experts hold first, then the least recently used (the leader holds the new key and fits
in the capacity, so they always make room).

The real cache never evicts a key the leader holds. After a change of leader it converges to
the new leader's set as keys are missed; while that expert leads, each of its keys is missed at
most once, so a change of leader costs at most as many hits as the new leader holds keys the
real cache lacks (in practice a few: the gaps to the best expert in docs/BENCHMARKS.md come
from these changes). Like ARC's ghost lists or LeCaR's regret, this only uses the access
stream; no trace or workload is named anywhere.

The LLM-aware expert leads from the start and wins ties, so loops and declared classes behave
as in the seed until another expert has shown more hits on this workload. ``leader`` names the
expert followed now and ``switches`` counts changes (:meth:`AdaptiveLLMPolicy.report`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from .llm_aware import LLMAwarePolicy

__all__ = ["AdaptiveLLMPolicy", "Expert"]


class Expert:
    """One policy simulated over its own key set of ``capacity`` bytes (no values held)."""

    def __init__(self, name: str, policy: object, capacity: int) -> None:
        self.name = name
        self.policy = policy
        self.capacity = capacity
        self.held: dict[Hashable, int] = {}
        self.used = 0
        self.score = 0.0
        self.hits = 0

    def read(self, key: Hashable, size: int, cls: str) -> bool:
        """Replay one read; True if this expert's cache would have served it."""
        p = self.policy
        if key in self.held:
            p.hit(key, cls)  # type: ignore[attr-defined]
            return True
        victims = p.admit(key, size, cls, self.capacity - self.used)  # type: ignore[attr-defined]
        if victims is None:
            return False
        for v in victims:
            self.used -= self.held.pop(v)
            p.removed(v)  # type: ignore[attr-defined]
        if self.used + size > self.capacity:  # under-evicting policy: stay in budget
            return False
        self.held[key] = size
        self.used += size
        p.inserted(key, size, cls)  # type: ignore[attr-defined]
        return False


class AdaptiveLLMPolicy:
    """LLM-aware classification, falling back to LRU or LFU where they do better (see module)."""

    name = "llm"

    def __init__(self, capacity: int, *, half_life: int = 2000,
                 experts: tuple[tuple[str, Callable[[int], object]], ...] | None = None) -> None:
        from .policies import LeCaRPolicy, LFUPolicy, LRUPolicy

        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, got {capacity}")
        if half_life < 1:
            raise ValueError(f"half_life must be at least 1 read, got {half_life}")
        self.capacity = capacity
        made = experts or (("llm-static", LLMAwarePolicy), ("lru", LRUPolicy), ("lfu", LFUPolicy),
                           ("lecar", LeCaRPolicy))
        self.experts = [Expert(n, factory(capacity), capacity) for n, factory in made]
        self._decay = 0.5 ** (1.0 / half_life)
        self._resident = LRUPolicy(capacity)  # the real cache's keys, sizes and recency
        self.sizes = self._resident.sizes
        self._lead = 0
        self.switches = 0

    @property
    def leader(self) -> str:
        return self.experts[self._lead].name

    def report(self) -> dict[str, object]:
        """The expert followed now, how often the leader changed, and each expert's hits."""
        return {"leader": self.leader, "switches": self.switches,
                "expert_hits": {e.name: e.hits for e in self.experts}}

    def _read(self, key: Hashable, size: int, cls: str) -> None:
        for e in self.experts:
            hit = e.read(key, size, cls)
            e.score = e.score * self._decay + hit
            e.hits += hit
        best = max(range(len(self.experts)), key=lambda i: (self.experts[i].score, -i))
        if self.experts[best].score > self.experts[self._lead].score:
            self._lead = best
            self.switches += 1

    # -- Policy protocol -------------------------------------------------------------------

    def hit(self, key: Hashable, cls: str) -> None:
        self._read(key, self.sizes[key], cls)
        self._resident.hit(key, cls)

    def admit(self, key: Hashable, size: int, cls: str, free: int) -> list[Hashable] | None:
        self._read(key, size, cls)
        held = self.experts[self._lead].held
        if key not in held or size > self.capacity:
            return None
        # Keys the leader does not hold, those fewest experts hold first, then least recent.
        others = [k for k in self._resident.order() if k not in held]
        others.sort(key=lambda k: sum(k in e.held for e in self.experts))
        victims: list[Hashable] = []
        for k in others:
            if free >= size:
                break
            victims.append(k)
            free += self.sizes[k]
        return victims if free >= size else None

    def inserted(self, key: Hashable, size: int, cls: str) -> None:
        self._resident.inserted(key, size, cls)

    def removed(self, key: Hashable) -> None:
        self._resident.removed(key)
