"""What a verify forward costs: the time of a forward that feeds the pending token plus ``k``
draft tokens, in units of a one-token forward (plain decoding's step).

On a GPU such a forward costs about as much as a one-token forward for small ``k``; on a CPU
with one thread every extra row of the matrix products costs, and SmolLM2-135M measured about
2x a one-token forward already at ``k = 1`` (``benchmarks/verify_cost.py``). A draft pays only
when the tokens it is expected to add outweigh that: :class:`~percache_plugin.decode.schedule.DraftSchedule`
reads the curve to choose the draft length (or none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["VerifyCost", "SMOLLM2_CPU_COST"]


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


SMOLLM2_CPU_COST = VerifyCost((1.7, 2.0, 1.5, 1.65, 1.8, 1.9, 1.9, 1.9, 2.0, 2.05, 2.1, 2.2, 2.25, 2.3, 2.3, 2.3))
"""SmolLM2-135M (fp32) on one CPU thread over a 600-700-token cache, k = 1..16: the mean of
``benchmarks/verify_cost.py --cached 600`` and of the forwards timed inside the drafted decoding
loop (docs/BENCHMARKS.md, "Decoding with verified drafts"), both measured on a loaded 2-core
machine. Feeding 4 tokens (k = 3) measured cheaper than feeding 2 or 3 in both."""
