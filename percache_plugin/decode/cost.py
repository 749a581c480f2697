"""What a verify forward costs: the time of a forward that feeds the pending token plus ``k``
draft tokens, in units of a one-token forward (plain decoding's step).

On a GPU such a forward costs about as much as a one-token forward for small ``k``. On a CPU with
one thread, torch's MKL kernels cost 1.4-3x one row's time for 2-9 input rows, and
SmolLM2-135M measured about 1.5-2x a one-token forward already at ``k = 1``
(``benchmarks/verify_cost.py``); over oneDNN-packed weights (:mod:`~percache_plugin.decode.packed`)
1.1-1.3x up to ``k = 8``. A draft pays only when the tokens it is expected to add outweigh that: :class:`~percache_plugin.decode.schedule.DraftSchedule`
reads the curve to choose the draft length (or none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["VerifyCost", "SMOLLM2_CPU_COST", "SMOLLM2_CPU_COST_PACKED"]


@dataclass(frozen=True)
class VerifyCost:
    """The cost of verifying ``k`` draft tokens: ``ratios[k - 1]`` one-token forwards.

    :ivar ratios: for ``k = 1, 2, ...``; beyond the last entry the curve continues with the
        mean slope of the table (flat for a table of one entry).
    """

    ratios: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.ratios:
            raise ValueError("a verify cost curve needs at least one ratio (k = 1)")
        for r in self.ratios:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not r > 0:
                raise ValueError(f"verify cost ratios must be positive numbers, got {r!r}")

    @classmethod
    def of(cls, ratios: Sequence[float]) -> VerifyCost:
        return cls(tuple(float(r) for r in ratios))

    def __call__(self, k: int) -> float:
        """One-token forwards a forward verifying ``k`` draft tokens costs (1.0 for ``k = 0``)."""
        if k <= 0:
            return 1.0
        n = len(self.ratios)
        if k <= n:
            return self.ratios[k - 1]
        slope = (self.ratios[-1] - self.ratios[0]) / (n - 1) if n > 1 else 0.0
        return self.ratios[-1] + max(0.0, slope) * (k - n)


SMOLLM2_CPU_COST = VerifyCost((1.66, 1.97, 1.42, 1.7, 1.56, 1.72, 1.7, 1.91, 1.93, 1.92, 1.95, 1.99, 2.08, 2.21, 2.32, 2.28))
"""SmolLM2-135M (fp32) on one CPU thread over a 600-token cache, k = 1..16, with the model's own
linear kernels and percache's attention (``benchmarks/verify_cost.py --cached 600``, set-up
``gqa``; docs/BENCHMARKS.md, "What a verify forward costs"): the schedule's curve when the
weights are not packed (``Config.draft_packed_linears`` off, or nothing to pack)."""

SMOLLM2_CPU_COST_PACKED = VerifyCost((1.29, 1.25, 1.11, 1.14, 1.08, 1.25, 1.18, 1.19, 1.27, 1.29, 1.4, 1.36, 1.4, 1.53, 1.5, 1.59))
"""The same with the linear layers of the verify forwards over oneDNN-packed weights (set-up
``packed``; the one-token forward the model's own): the default curve of drafted decoding on
the CPU. Both curves from one run interleaving the set-ups, at a load average of 6-8. Measured
before verify forwards padded 2-3 rows and folded the attention's query groups: the curve measured
after (2,000 cached tokens: 1.04, 1.08, 1.07 at k = 1-3, 1.30-1.95 at k = 6-16) chose shorter drafts,
needed more forwards in bench decode and gained nothing measurable (docs/BENCHMARKS.md, "Verify
forwards nearer one-token cost"), so this one stays the default."""
