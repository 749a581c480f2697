"""Which positions of shifted chunks to recompute: the built-in strategies.

A strategy string names one: ``none``; ``all``; ``head:k`` (the first k tokens of each shifted
chunk that does not start the prompt, as EPIC does: it removes the spurious attention sinks at
chunk starts); ``tail:k`` (the last k tokens of each shifted chunk, as HuoziIME does);
``deviation:r`` (CacheBlend-style: compute layer 1 for every token, recompute the fraction r of
shifted tokens whose K/V deviate most from the injected ones). ``k`` is a token count, or a
fraction of each chunk's tokens when below 1 (``head:0.1``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

__all__ = ["RecomputeContext", "RecomputeStrategy", "parse_strategy", "STRATEGIES"]


@dataclass
class RecomputeContext:
    """What a recompute strategy may look at.

    :ivar spans: ``(start, end)`` prompt positions of each shifted chunk, in prompt order.
    :ivar deviation_fn: runs the probe for one layer and returns, per candidate position, how far
        the freshly computed K/V are from the injected ones (lazily; costs a partial forward).
    """

    spans: tuple[tuple[int, int], ...]
    deviation_fn: Callable[[int], torch.Tensor]
    _deviation: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def candidates(self) -> torch.Tensor:
        """Every position served shifted (sorted), the only ones a strategy may pick."""
        if not self.spans:
            return torch.zeros(0, dtype=torch.long)
        return torch.cat([torch.arange(s, e) for s, e in self.spans])

    def deviation(self, layer: int = 1) -> torch.Tensor:
        """Per-candidate K/V deviation at ``layer`` (cached per layer)."""
        if layer not in self._deviation:
            self._deviation[layer] = self.deviation_fn(layer)
        return self._deviation[layer]


def _count(amount: float, n: int) -> int:
    return min(n, int(amount) if amount >= 1 else math.ceil(amount * n))


def _head(ctx: RecomputeContext, amount: float) -> list[int]:
    return [p for s, e in ctx.spans if s > 0 for p in range(s, s + _count(amount, e - s))]


def _tail(ctx: RecomputeContext, amount: float) -> list[int]:
    return [p for s, e in ctx.spans for p in range(e - _count(amount, e - s), e)]


def _deviation(ctx: RecomputeContext, amount: float) -> list[int]:
    cand = ctx.candidates
    k = _count(amount, cand.numel())
    if k == 0:
        return []
    top = torch.topk(ctx.deviation(1), k).indices
    return sorted(cand[top].tolist())


@dataclass(frozen=True)
class RecomputeStrategy:
    """A named way to choose positions to recompute.

    :ivar choose: ``choose(context, amount)`` returns prompt positions (among
        ``context.candidates``).
    :ivar takes_amount: whether the spec carries ``:amount`` (``head:4``) or none (``all``).
    :ivar max_amount: the largest amount allowed (None: unbounded).
    """

    choose: Callable[[RecomputeContext, float], list[int]]
    takes_amount: bool = False
    max_amount: float | None = None


STRATEGIES: dict[str, RecomputeStrategy] = {
    "none": RecomputeStrategy(lambda ctx, _: []),
    "all": RecomputeStrategy(lambda ctx, _: ctx.candidates.tolist()),
    "head": RecomputeStrategy(_head, takes_amount=True),
    "tail": RecomputeStrategy(_tail, takes_amount=True),
    "deviation": RecomputeStrategy(_deviation, takes_amount=True, max_amount=1.0),
}
"""The built-in strategies (registered by the built-in recompute plugin)."""


def parse_strategy(spec: str, strategies: Mapping[str, RecomputeStrategy] | None = None,
                   ) -> Callable[[RecomputeContext], list[int]]:
    """``"head:4"`` -> a function of the context; raises ValueError naming a bad spec.

    :param strategies: the known strategies by name (default: the built-in ones).
    """
    known = STRATEGIES if strategies is None else strategies
    if not isinstance(spec, str):
        raise ValueError(f"recompute strategy must be a str, got {spec!r}")
    name, _, arg = spec.partition(":")
    if name not in known:
        raise ValueError(f"unknown recompute strategy {name!r} in {spec!r}; known: {sorted(known)}")
    strategy = known[name]
    if strategy.takes_amount != bool(arg):
        raise ValueError(f"recompute strategy {spec!r}: {name} "
                         f"{'needs' if strategy.takes_amount else 'takes no'} argument")
    try:
        amount = float(arg) if arg else 0.0
    except ValueError:
        raise ValueError(f"recompute strategy {spec!r}: {arg!r} is not a number") from None
    if amount < 0 or (strategy.max_amount is not None and amount > strategy.max_amount):
        raise ValueError(f"recompute strategy {spec!r}: amount out of range")
    return lambda ctx: strategy.choose(ctx, amount)
