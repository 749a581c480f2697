"""Hits on stored nodes that were served without reading the store (by the RAM tier in front
of it), kept in memory and written to the nodes' rows in one transaction now and then.

The store's eviction ranks nodes by their ``hits`` and ``last_access`` columns; a node that a
cache in front of the store serves on every request must look hot there too, without a SQLite
write on every hit (that would cost the hit path as much as the read it saves).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["HitBuffer"]


@dataclass
class HitBuffer:
    """Pending hit counts per node key.

    :ivar max_pending: hits after which :meth:`add` asks for a flush.
    :ivar max_age_s: seconds after the oldest pending hit after which :meth:`add` asks for one.
    """

    max_pending: int = 64
    max_age_s: float = 1.0
    _counts: dict[str, int] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)
    _n: int = 0
    _since: float = 0.0

    def add(self, key: str) -> bool:
        """Count a hit on ``key``; True when the pending hits should be written now."""
        now = time.time()
        if not self._n:
            self._since = now
        self._counts[key] = self._counts.get(key, 0) + 1
        self._last[key] = now
        self._n += 1
        return self._n >= self.max_pending or now - self._since >= self.max_age_s

    def drain(self) -> list[tuple[str, int, float]]:
        """The pending ``(key, hits, last access)`` triples, forgotten here."""
        out = [(k, n, self._last[k]) for k, n in self._counts.items()]
        self._counts, self._last, self._n = {}, {}, 0
        return out

    def __len__(self) -> int:
        return self._n
