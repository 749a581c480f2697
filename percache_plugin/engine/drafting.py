"""The drafted decoding of a request: draft sources from the hooks, a schedule over the
handle's acceptance history and verify-cost curve, the packed linear weights."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ..attention.masks import MaskFunction
from ..best_effort import best_effort
from ..config import Config
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
from ..decode.calibrate import CalibrationProgress, measure_curve
from ..decode.chunked import StopCheck
from ..decode.stored_cost import CurveLookup, StoredCurve
from ..decode.tree import tree_usable
from ..hooks.contexts import EngineContext
from ..hooks.manager import Hooks
from ..segments import Prompt
from ..stats import GenerationStats, StatsTotals

__all__ = ["DraftSetup"]


class DraftSetup:
    """What every drafted decoding of one handle shares: how drafts of each kind fared across
    answers (``history``), the verify cost measured on its forwards
    (``Config.draft_cost_online``: one :class:`~percache_plugin.decode.MeasuredCost` per curve),
    the packed weights (``Config.draft_packed_linears``: packed at first use) and the verify cost
    curves measured on this machine and kept in the store (``curves``).

    :ivar measured_now: the curve :meth:`measure` returned last (stats name it "measured now"
        while it is ``Config.draft_verify_cost``).
    :ivar calibrations: the measurings of :meth:`measure`, by curve key (model and machine, as
        the stored curve) and arguments: an unfinished one keeps its times across idle gaps.
    """

    def __init__(self, model: Any, curves: CurveLookup | None = None) -> None:
        self._model = model
        self.history = AcceptanceHistory()
        self.measured: dict[VerifyCost, MeasuredCost] = {}
        self._packing = PackOnDemand(model)
        self.curves = curves if curves is not None else CurveLookup(None)
        self.measured_now: tuple[float, ...] | None = None
        self.calibrations: dict[tuple[str, int, int, int], CalibrationProgress] = {}

    def curve(self, fingerprint: str, config: Config) -> tuple[VerifyCost, str]:
        """The curve drafts are priced by now, and how stats name it: ``"given"``
        (``Config.draft_verify_cost``), ``"measured now"`` (by this handle), ``"stored (measured
        <date>)"`` (found in the store for this model and machine) or ``"built-in"``."""
        cost = config.draft_verify_cost
        if cost:
            return VerifyCost(cost), "measured now" if cost == self.measured_now else "given"
        stored = self.stored(fingerprint, config)
        if stored is not None:
            return VerifyCost(stored.ratios), stored.label()
        return self.builtin(config), "built-in"

    def builtin(self, config: Config) -> VerifyCost:
        """The built-in curve for ``config``: with or without packed weights as they are used."""
        return SMOLLM2_CPU_COST_PACKED if self.packs(config) else SMOLLM2_CPU_COST

    def packs(self, config: Config) -> bool:
        """Whether verify forwards run over packed linear weights under ``config``."""
        return self._packing.where(config.draft_packed_linears) is not None

    def stored(self, fingerprint: str, config: Config) -> StoredCurve | None:
        """The curve stored for this model, machine and packing, or None (one lookup per key
        and handle)."""
        return self.curves.get(fingerprint, self._model, self.packs(config))

    def measure(self, fingerprint: str, config: Config, totals: StatsTotals, *, cached_tokens: int,
                max_k: int, repeats: int, progress: bool = False,
                should_stop: StopCheck | None = None) -> tuple[float, ...]:
        """Measure the verify cost curve as drafted decoding runs its forwards
        (:func:`~percache_plugin.decode.calibrate.measure_curve`) and store it for this model
        and machine (a failed write is counted in ``totals.store_errors``; the handle uses the
        curve anyway). Raises ``MeasuringStopped`` (a ``Preempted``) when ``should_stop`` ends it:
        nothing is stored, and the forwards it timed and its cache are kept for the next call on this
        model, machine and arguments (:attr:`calibrations`) that can be stopped too; a call that
        cannot (``pc.measure_verify_cost()``) measures all of it now."""
        packed = self.packs(config)
        key = (self.curves.key(fingerprint, self._model, packed), cached_tokens, max_k, repeats)
        for other, earlier in self.calibrations.items():
            if other != key and earlier.cache is not None:  # of another model or set-up: free it
                earlier.tokens_abandoned += earlier.cached
                earlier.cache, earlier.cached = None, 0
        kept = self.calibrations.setdefault(key, CalibrationProgress())
        curve = measure_curve(self._model, cached_tokens=cached_tokens, max_k=max_k, repeats=repeats,
                              route=self.verify_route(config.draft_packed_linears), progress=progress,
                              should_stop=should_stop, prefill_chunk=config.background_prefill_chunk,
                              resume=kept)
        with best_effort("storing the measured verify cost curve", totals):
            self.curves.put(fingerprint, self._model, packed, curve)
        return curve

    def calibration_totals(self) -> dict[str, int]:
        """The counters of every measuring of :meth:`measure` summed (``runs``, ``preempted``,
        ``tokens``, ``tokens_abandoned``) and ``points``, the forwards the unfinished ones keep
        (``pc.stats()``'s ``calibration_*``)."""
        got = list(self.calibrations.values())
        return {"runs": sum(p.runs for p in got), "preempted": sum(p.preempted for p in got),
                "points": sum(p.points for p in got if not p.finished),
                "tokens": sum(p.tokens for p in got), "tokens_abandoned": sum(p.tokens_abandoned for p in got)}

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
        curve, stats.draft_cost_curve = self.curve(ctx.fingerprint, config)
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
        """Free the packed copies and close the curves' database."""
        self._packing.where(False)
        self.curves.close()
