"""What an idle task runner may use: :class:`IdleContext`, built once per assistant.

Runners registered through ``percache_register_idle_tasks`` get this object, not the
assistant (the way a hook gets a context object, not the handle): the assistant's hook
context (settings, hooks, embedder, idle queue, ``query``), generation and prefill through
the engine, the prediction state, and the few QA-bank steps the built-in runners take.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.query import Query
    from ..hooks.contexts import AssistantContext
    from ..predict.state import PredictionState
    from ..rag.qa_types import QAEntry
    from ..request import Prefilled
    from ..stats import Generation, StatsTotals
    from .ask import Answer
    from .scheduler import BackgroundStats

__all__ = ["IdleContext"]


class IdleContext:
    """The narrow view of an assistant that idle task runners receive.

    :ivar ctx: the assistant's hook context: ``ctx.config``, ``ctx.hooks``, ``ctx.query(text)``,
        ``ctx.idle_queue`` (pass it to ``ctx.hooks.*`` calls).
    :ivar generate: ``Engine.generate`` (preempted by foreground requests).
    :ivar prefill: ``Engine.prefill``, then the K/V it stored for a chunk another handle or
        process removed meanwhile is deleted (``ask.prefill_checked``).
    :ivar tokenizer: the model's tokenizer.
    :ivar context: the model's context length in tokens (None: its config states none).
    :ivar n_parameters: the model's parameter count (FLOP estimates).
    :ivar answer: ``answer(query, scope, *, origin, **generate_kwargs)``: retrieve, generate
        and store a QA entry (the miss path of ``ask()``), or, when ``ask()`` would find no
        relevant documents (``Config.relevance_threshold``), the no-documents answer, nothing
        generated or stored.
    :ivar served_paraphrases: ``served_paraphrases(query, scope)``: stored entries similar to
        ``query`` (most similar first; empty when the built-in QA bank is not registered).
    :ivar dispute: ``dispute(entry)``: put ``entry`` and its paraphrases out of service;
        returns how many entries that touched.
    :ivar background_stats: background compute per task kind (runners add their cost).
    :ivar totals: the handle's totals (``pc.stats()``): a runner adds there the failures it
        counts outside a request (a cache write's ``plugin_errors`` or ``store_errors``), as a
        foreground request does.
    :ivar calibrate: ``calibrate()``: measure and store the verify cost curve if still needed
        (:func:`~percache_plugin.assistant.calibrate_task.measure_in_idle`): the tokens it
        computed, or None when nothing ran.
    """

    def __init__(self, ctx: AssistantContext, *, generate: Callable[..., Generation],
                 prefill: Callable[..., Prefilled], tokenizer: Any, n_parameters: int,
                 prediction_state: Callable[[], PredictionState], answer: Callable[..., Answer],
                 served_paraphrases: Callable[[Query, str | None], list[QAEntry]],
                 dispute: Callable[[QAEntry], int], background_stats: BackgroundStats,
                 totals: StatsTotals, calibrate: Callable[[], int | None] = lambda: None,
                 context: int | None = None) -> None:
        self.ctx = ctx
        self.generate = generate
        self.prefill = prefill
        self.tokenizer = tokenizer
        self.context = context
        self.n_parameters = n_parameters
        self._prediction_state = prediction_state
        self.answer = answer
        self.served_paraphrases = served_paraphrases
        self.dispute = dispute
        self.background_stats = background_stats
        self.totals = totals
        self.calibrate = calibrate

    @property
    def prediction_state(self) -> PredictionState:
        """Predicted-question state: pending chunks, abstracts, recent questions per scope."""
        return self._prediction_state()
