"""How many tokens of a proposed draft to verify (none when it would not pay).

transformers' ``"heuristic"`` schedule for assistant models grows the draft by 2 after a fully
accepted one and shrinks it by 1 otherwise, whatever a forward costs. Here the choice weighs the
cost of the verify forward (:class:`~percache_plugin.decode.cost.VerifyCost`, in one-token
forwards) against the tokens the draft is expected to add: with ``p`` the estimated chance that
a draft token of this kind stands given the one before did (:mod:`.acceptance`: this answer's
drafts of the kind, plus the handle's history across answers, plus a prior), a ``k``-token draft
adds ``p + p^2 + ... + p^k`` tokens on average, so one forward emits ``1 + that`` tokens for
``cost(k)`` one-token forwards. The schedule picks the ``k`` with the most tokens per unit of
cost, and proposes nothing unless that beats plain decoding (one token per unit) by ``margin``.
Of several candidates (:meth:`DraftSchedule.choose`) the one promising the most tokens per
unit of cost is verified (on the development meetings of ``percache bench decode`` that
replayed 2.48x against 2.35x for always the longest match). A kind that keeps being rejected
stops being verified; it comes back when the estimate rises again (its history across answers,
or a long match of the same source, which is another kind).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .acceptance import AcceptanceHistory, Tally, draft_kind
from .cost import SMOLLM2_CPU_COST, VerifyCost
from .lookup import Draft
from .measured import MeasuredCost

__all__ = ["DraftSchedule"]


@dataclass
class DraftSchedule:
    """Draft length choices of one request.

    :ivar cost: the verify cost curve (a :class:`~percache_plugin.decode.measured.MeasuredCost`
        learns from the forwards :meth:`observe` reports).
    :ivar history: tallies across answers (read here; merged by the caller after the answer).
    :ivar max_length: the longest draft verified.
    :ivar prior_accepted: Beta prior, accepted tokens.
    :ivar prior_rejected: Beta prior, rejections (3 and 1: a kind never seen starts at p = 0.75,
        worth 4 observations; chosen on the development meetings of ``percache bench decode``
        with ``benchmarks/draft_replay.py``, docs/BENCHMARKS.md).
    :ivar margin: tokens per unit of cost a draft must be expected to beat (1.0: plain decoding).
    """

    cost: VerifyCost | MeasuredCost = SMOLLM2_CPU_COST
    history: AcceptanceHistory | None = None
    max_length: int = 16
    prior_accepted: float = 3.0
    prior_rejected: float = 1.0
    margin: float = 1.0
    tallies: dict[str, Tally] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {self.max_length}")
        if not (self.prior_accepted > 0 and self.prior_rejected > 0):
            raise ValueError("the prior counts must be positive")
        if not self.margin > 0:
            raise ValueError(f"margin must be positive, got {self.margin!r}")

    def p(self, kind: str) -> float:
        """Estimated chance that a draft token of ``kind`` stands, given the one before did."""
        mine = self.tallies.get(kind, Tally())
        past = self.history.get(kind) if self.history is not None else Tally()
        acc = mine.accepted + past.accepted + self.prior_accepted
        return acc / (acc + mine.rejected + past.rejected + self.prior_rejected)

    def length(self, draft: Draft) -> int:
        """How many of ``draft``'s tokens to verify: the length with the most expected tokens
        per unit of cost, or 0 when no length beats plain decoding by ``margin``."""
        return self._plan(draft)[0]

    def choose(self, drafts: Sequence[Draft]) -> tuple[Draft | None, int]:
        """Of ``drafts``, the one whose best length promises the most tokens per unit of cost
        (the first of equals), and that length; ``(None, 0)`` when none beats plain decoding."""
        best: tuple[Draft | None, int, float] = (None, 0, self.margin)
        for d in drafts:
            k, rate = self._plan(d)
            if k and rate > best[2]:
                best = (d, k, rate)
        return best[0], best[1]

    def _plan(self, draft: Draft) -> tuple[int, float]:
        p = self.p(draft_kind(draft))
        best_k, best = 0, self.margin
        gain, run = 0.0, 1.0
        for k in range(1, min(len(draft.tokens), self.max_length) + 1):
            run *= p
            gain += run
            rate = (1.0 + gain) / self.cost(k)
            if rate > best:
                best_k, best = k, rate
        return best_k, best

    def observe(self, fed: int, seconds: float) -> None:
        """A decode forward after the answer's first fed ``fed`` draft tokens and took ``seconds``
        (kept where the cost curve learns from timings)."""
        if isinstance(self.cost, MeasuredCost):
            self.cost.observe(fed, seconds)

    def update(self, draft: Draft, proposed: int, accepted: int) -> None:
        """The first ``proposed`` tokens of ``draft`` were verified; the first ``accepted`` stood."""
        if proposed > 0:
            self.tallies.setdefault(draft_kind(draft), Tally()).add(proposed, accepted)
