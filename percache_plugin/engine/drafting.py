"""The drafted decoding of a request: draft sources from the hooks, a schedule over the
handle's acceptance history and verify-cost curve, the packed linear weights."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ..attention.masks import MaskFunction
from ..decode import (
    SMOLLM2_CPU_COST,
    SMOLLM2_CPU_COST_PACKED,
    AcceptanceHistory,
    DraftedDecoding,
    DraftHints,
    DraftSchedule,
    MeasuredCost,
    PackOnDemand,
    VerifyCost,
    greedy_reason,
)
from ..decode.tree import tree_usable
from ..hooks.contexts import EngineContext
from ..hooks.manager import Hooks
from ..segments import Prompt
from ..stats import GenerationStats

__all__ = ["DraftSetup"]


class DraftSetup:
    """What every drafted decoding of one handle shares: how drafts of each kind fared across
    answers (``history``), the verify cost measured on its forwards
    (``Config.draft_cost_online``: one :class:`~percache_plugin.decode.MeasuredCost` per curve)
    and the packed weights (``Config.draft_packed_linears``: packed at first use)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.history = AcceptanceHistory()
        self.measured: dict[VerifyCost, MeasuredCost] = {}
        self._packing = PackOnDemand(model)

    def for_request(self, ctx: EngineContext, hooks: Hooks, prompt: Prompt, kwargs: dict[str, Any],
                    hints: DraftHints | None, stats: GenerationStats, *, enabled: bool,
                    mask_function: Callable[[], MaskFunction | None]) -> DraftedDecoding | None:
        """The drafted decoding loop for a request decoding ``prompt`` with ``kwargs``, or None
        (``stats.drafting`` says why)."""
        config = ctx.config
        reason = "off" if not (config.drafting and enabled) else greedy_reason(self._model, kwargs)
        if reason:
            stats.drafting = reason
            return None
        sources = hooks.draft_sources(ctx, prompt, hints or DraftHints())
        packed, cost = self._packing.where(config.draft_packed_linears), config.draft_verify_cost
        curve = VerifyCost(cost) if cost else SMOLLM2_CPU_COST_PACKED if packed else SMOLLM2_CPU_COST
        priced: VerifyCost | MeasuredCost = curve
        if config.draft_cost_online and not cost:  # a curve the caller gives is used as given
            priced = self.measured.setdefault(curve, MeasuredCost(curve))
        drafting = DraftedDecoding.from_sources(sources, prompt.input_ids, config.draft_sources,
                                                DraftSchedule(cost=priced, history=self.history))
        drafting.linears = packed  # packs at its first verify after a first token
        drafting.tree = config.draft_tree and tree_usable(self._model, mask_function())
        return drafting

    def pack(self, on: bool) -> int:
        """Pack the linear weights now where ``on`` (else at the first verify after a first
        token): their bytes, or 0."""
        packed = self._packing.where(on)
        return packed.get().nbytes if packed else 0

    def verify_route(self, packed: bool) -> Callable[[int], AbstractContextManager[Any]]:
        """The context drafted decoding runs a forward feeding ``k`` draft tokens in: over the
        packed weights (made now if needed) for ``k >= 1`` where ``packed`` and the model can be
        packed, else the model's own kernels (as for ``k = 0``)."""
        on = self._packing.where(packed)
        return lambda k: on.get().active() if on is not None and k >= 1 else contextlib.nullcontext()

    @property
    def packed(self) -> bool:
        """Whether the packed copies exist now."""
        return self._packing.packed is not None

    def release(self) -> None:
        """Free the packed copies."""
        self._packing.where(False)
