"""A verify cost curve that learns from the handle's own forwards.

The default curves (:mod:`.cost`) were measured once, on one machine, at one load. At another
load the shape moves: a dev profile at load 7-9 measured a forward verifying 8 draft tokens at
1.37 one-token forwards where the curve says 1.19 (docs/BENCHMARKS.md), so the schedule chose
drafts longer than paid. :class:`MeasuredCost` starts from such a curve and moves each ``k``
towards what this process's forwards took: every decode forward after an answer's first is
timed; a one-token forward updates a running estimate of the one-token time (an exponential
average of its logarithm), and a forward verifying ``k`` draft tokens adds how far the ratio of
its time to that estimate lies above or below the prior's ratio (in logarithms) to ``k``'s tally
(the last ``cap`` weigh, older ones fade). ``cost(k)`` is the prior's ratio times the mean
excess, the prior worth ``weight`` observations of no excess; the tallies of nearby ``j`` count
too, with weight ``spread ** |k - j|`` (the shape moves smoothly: a load that makes 8 draft
tokens dear makes 7 dear too, so the schedule does not flee to a length never measured).
Ratios are clipped to ``clip`` so that one forward stalled by the machine moves little.

The schedule's choices then depend on timings, so forward counts are no longer reproducible
run to run. ``Config.draft_cost_online`` turns it on; it is off by default, because on the
development meetings of ``percache bench decode`` it did not pay (side by side with the fixed
curve, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .cost import VerifyCost

__all__ = ["MeasuredCost"]


@dataclass
class MeasuredCost:
    """``prior`` moved towards the verify forwards measured on this handle.

    :ivar prior: the curve to start from (one-token forwards per verify forward, by ``k``).
    :ivar weight: observations the prior is worth, per ``k``.
    :ivar cap: observations kept per ``k``; beyond, the tally fades (recent forwards weigh more).
    :ivar base_rate: weight of each new one-token forward in the running one-token time.
    :ivar clip: bounds on one observed ratio.
    :ivar spread: weight of a neighbouring ``k``'s tally, per step of distance.
    """

    prior: VerifyCost
    weight: float = 8.0
    cap: float = 40.0
    base_rate: float = 0.2
    clip: tuple[float, float] = (0.5, 4.0)
    spread: float = 0.5
    _log_base: float | None = field(default=None, repr=False)
    _sum: dict[int, float] = field(default_factory=dict, repr=False)  # sum of log(ratio / prior), by k
    _n: dict[int, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not (self.weight > 0 and self.cap > 0 and 0 < self.base_rate <= 1):
            raise ValueError("weight and cap must be positive and base_rate in (0, 1]")
        if not 0 <= self.spread < 1:
            raise ValueError(f"spread must be in [0, 1), got {self.spread!r}")
        if not 0 < self.clip[0] <= self.clip[1]:
            raise ValueError(f"clip must be 0 < low <= high, got {self.clip!r}")

    def observe(self, k: int, seconds: float) -> None:
        """A decode forward that verified ``k`` draft tokens (0: a one-token forward) took
        ``seconds``. Ratios need a one-token time first: verify forwards before one are not kept."""
        if not (seconds > 0 and math.isfinite(seconds)) or k < 0:
            return
        log_s = math.log(seconds)
        if k == 0:
            self._log_base = log_s if self._log_base is None else \
                self._log_base + self.base_rate * (log_s - self._log_base)
            return
        if self._log_base is None:
            return
        lo, hi = math.log(self.clip[0]), math.log(self.clip[1])
        r = min(hi, max(lo, log_s - self._log_base)) - math.log(self.prior(k))
        n = self._n.get(k, 0.0)
        total = self._sum.get(k, 0.0)
        if n >= self.cap:  # fade: keep the mean, drop one observation's weight
            total *= (self.cap - 1) / n
            n = self.cap - 1
        self._sum[k], self._n[k] = total + r, n + 1

    def observed(self, k: int) -> tuple[float, float] | None:
        """The geometric mean ratio measured for ``k`` and its observations, or None."""
        n = self._n.get(k, 0.0)
        return (self.prior(k) * math.exp(self._sum[k] / n), n) if n else None

    def __call__(self, k: int) -> float:
        """One-token forwards a forward verifying ``k`` draft tokens costs (1.0 for ``k = 0``)."""
        if k <= 0:
            return 1.0
        excess, n = 0.0, self.weight
        for j, nj in self._n.items():
            w = self.spread ** abs(k - j)
            excess += w * self._sum[j]
            n += w * nj
        return self.prior(k) * math.exp(excess / n)
