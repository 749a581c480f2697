"""Which retrieved facts are recalled: a similarity threshold and a guard against degenerate
score distributions.

A query that matches nothing in particular (small talk, "ok", a message in another language)
still gets a "best" fact; with a few facts stored, all of them then score about the same.
:func:`select` refuses such a flat distribution unless its best hit is strong on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .bank import FactHit

__all__ = ["MEMORY_HEADER", "RecallGuard", "memory_block", "select"]

MEMORY_HEADER = "Relevant memories:\n"


@dataclass(frozen=True)
class RecallGuard:
    """:ivar threshold: least cosine similarity for a fact to be recalled.
    :ivar min_spread: with ``min_candidates`` or more candidates, a best-minus-worst cosine
        spread below this marks the distribution degenerate (the query does not discriminate).
    :ivar strong: a best hit at or above this cosine is recalled even from a flat distribution.
    """

    threshold: float = 0.35
    min_spread: float = 0.03
    min_candidates: int = 3
    strong: float = 0.6


def select(hits: Sequence[FactHit], k: int, guard: RecallGuard) -> list[FactHit]:
    """The facts to recall from ``hits`` (best first, as searched): at most ``k``, each at or
    above the threshold; none when the distribution is degenerate (see :class:`RecallGuard`)."""
    if not hits:
        return []
    sims = [h.similarity for h in hits]
    best = max(sims)
    flat = len(sims) >= guard.min_candidates and best - min(sims) < guard.min_spread
    if flat and best < guard.strong:
        return []
    return [h for h in hits if h.similarity >= guard.threshold][:k]


def memory_block(texts: Sequence[str]) -> str:
    """The recalled facts as the text put before a chat message ("" for none)."""
    if not texts:
        return ""
    return MEMORY_HEADER + "".join(f"- {t}\n" for t in texts) + "\n"
