"""How often drafts of each kind are accepted, in one answer and across answers.

A draft's kind is its source and how it matched (``"qa_bank/prefix"``: the start of an earlier
answer equals the generation; ``"prompt/4"``: an n-gram match running 4 tokens back). Each
verified draft is a run of accepted tokens ended by a rejection, unless every token stood: the
tally counts accepted tokens and rejections, and ``p = accepted / (accepted + rejections)`` is
the estimated chance that the next draft token stands given the one before did (a geometric
run). A Beta prior keeps the estimate away from 0 and 1 before anything was seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .lookup import Draft

__all__ = ["Tally", "AcceptanceHistory", "draft_kind"]


def draft_kind(draft: Draft) -> str:
    """``source/prefix`` for a draft by prefix of an earlier answer, else ``source/n`` with the
    match length ``n`` bucketed: 1, 2, 3, 4 (4 to 7 tokens) and 8 (8 or more). A single-token
    match is its own kind: on real text it is right far less often than a longer one. A further
    occurrence with another continuation (``Draft.rank`` > 0, token trees) adds ``+``."""
    if draft.by_prefix:
        return f"{draft.source}/prefix"
    m = draft.match
    return f"{draft.source}/{8 if m >= 8 else 4 if m >= 4 else max(m, 1)}" + ("+" if draft.rank else "")


@dataclass
class Tally:
    """Accepted draft tokens and rejections (drafts cut short) of one kind."""

    accepted: float = 0.0
    rejected: float = 0.0

    def add(self, proposed: int, accepted: int) -> None:
        self.accepted += accepted
        self.rejected += 1.0 if accepted < proposed else 0.0

    @property
    def seen(self) -> float:
        return self.accepted + self.rejected


class AcceptanceHistory:
    """Tallies by draft kind across the answers of one handle (not shared between handles).

    :param cap: the most observations (accepted tokens + rejections) kept per kind; beyond it
        the tally is scaled down to ``cap``, keeping its ratio, so recent answers weigh more.
    """

    def __init__(self, cap: float = 40.0) -> None:
        if not cap > 0:
            raise ValueError(f"history cap must be positive, got {cap!r}")
        self.cap = cap
        self._tallies: dict[str, Tally] = {}

    def get(self, kind: str) -> Tally:
        """The tally of ``kind`` (zero when unseen)."""
        return self._tallies.get(kind, Tally())

    def merge(self, tallies: Mapping[str, Tally]) -> None:
        """Add one answer's tallies."""
        for kind, t in tallies.items():
            mine = self._tallies.setdefault(kind, Tally())
            mine.accepted += t.accepted
            mine.rejected += t.rejected
            if mine.seen > self.cap:
                scale = self.cap / mine.seen
                mine.accepted *= scale
                mine.rejected *= scale

    def kinds(self) -> dict[str, Tally]:
        """A copy of every tally, by kind."""
        return {k: Tally(t.accepted, t.rejected) for k, t in self._tallies.items()}
