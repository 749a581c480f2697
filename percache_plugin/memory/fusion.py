"""Fusing facts and raw turns in one ranking: a fact and the turn it was extracted from are one
piece of evidence, so they take one slot of the ``k`` recalled, never two.

A memory item's sources are the ``session:turn`` ids of its ``metadata["source"]``. Walking the
hits best first, :func:`one_slot_per_source` keeps an item unless every one of its sources is
already covered by an item kept before it (a raw turn whose fact ranked higher, or the reverse);
the skipped items are counted. Items without sources are always kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .bank import FactHit

__all__ = ["Fused", "one_slot_per_source", "sources"]


def sources(metadata: Mapping[str, str]) -> tuple[str, ...]:
    """The ``session:turn`` ids a memory item came from (empty: added by hand)."""
    return tuple(s for s in metadata.get("source", "").split(",") if s)


@dataclass
class Fused:
    """The hits kept (best first) and how many were skipped as already covered."""

    hits: list[FactHit] = field(default_factory=list)
    skipped: int = 0


def one_slot_per_source(hits: Sequence[FactHit], k: int) -> Fused:
    """At most ``k`` of ``hits``, one per source (see the module docstring)."""
    out = Fused()
    covered: set[str] = set()
    for hit in hits:
        if len(out.hits) >= k:
            break
        src = sources(hit.fact.metadata)
        if src and covered.issuperset(src):
            out.skipped += 1
            continue
        covered.update(src)
        out.hits.append(hit)
    return out
