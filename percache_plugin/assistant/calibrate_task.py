"""Measuring the verify cost curve in idle time (``Config.draft_calibrate_idle``, task kind
``calibrate``).

Drafted decoding prices a draft by the verify cost curve (:mod:`percache_plugin.decode.cost`);
the built-in one was measured on one CPU and over-drafts on others. ``pc.measure_verify_cost()``
measures the handle's own curve (about 35 s for SmolLM2 on one CPU thread), but only when the
user calls it. So a handle that drafts with ``draft_verify_cost=None`` and finds no curve stored
for its model and machine (:mod:`percache_plugin.decode.stored_cost`) queues one ``calibrate``
task at ``enable()`` (and after ``configure()`` changes a setting the check reads); the task
measures with ``measure_verify_cost()``'s defaults and stores the curve, which the handle uses
from its next request on and every later handle on the store from its first.

The measuring yields like any idle task: the check between forwards stops it within one forward
(a background worker's when a foreground call waits; an explicit ``idle(budget_s=...)``'s when
the budget passes); nothing is stored and the task stays queued. The forwards it timed and its
cache are kept (``DraftSetup.calibrations``, by model, machine and arguments, in this handle's
memory): the next run completes the cache, warms up one round and times only the forwards still
missing, so idle gaps shorter than the whole measuring add up to a curve under steady traffic (a
gap must hold the warm-up round and a forward to add one). ``pc.stats()`` counts the runs, the
stopped ones, the forwards kept and the tokens the stopped runs computed for nothing (their
warm-ups: ``calibration_tokens_abandoned``). A task that finds the curve no longer needed (stored meanwhile, drafting off, a
curve given, calibration off, or a model whose context cannot hold the measuring) leaves the
queue, counted in ``IdleReport.skipped_by_kind``. Its compute (the cache built for it and the
tokens of its forwards, stopped runs included) is counted under the ``calibrate`` kind of the
background stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..best_effort import best_effort
from ..config import Config
from ..decode.calibrate import MEASURE_DEFAULTS, fit_cached
from ..decode.chunked import interrupt_check
from ..decode.generate import context_limit
from ..idle import IdleReport, IdleTask
from ..stats import GenerationStats

if TYPE_CHECKING:
    from ..engine import Engine
    from .assistant import Assistant
    from .idle_context import IdleContext

__all__ = ["CALIBRATE_KIND", "IDLE_MEASURE", "WATCHED", "calibrate", "calibration_needed", "measure_in_idle",
           "queue_calibration"]

CALIBRATE_KIND = "calibrate"
IDLE_MEASURE = MEASURE_DEFAULTS
"""What the idle task measures: ``pc.measure_verify_cost()``'s defaults."""
WATCHED = frozenset({"drafting", "draft_verify_cost", "draft_packed_linears", "draft_calibrate_idle"})
"""Settings whose change by ``configure()`` checks again whether a calibration is needed."""


def calibration_needed(engine: Engine, config: Config) -> bool:
    """Whether idle time should measure the curve: drafting on, no curve given, idle calibration
    on, and no curve stored for this model and machine (one lookup per key and handle)."""
    return (config.drafting and config.draft_calibrate_idle and config.draft_verify_cost is None
            and engine.drafts.stored(engine.fingerprint, config) is None)


def queue_calibration(a: Assistant) -> bool:
    """Queue the ``calibrate`` task if :func:`calibration_needed`; True if it was queued now."""
    if not calibration_needed(a.engine, a.config):
        return False
    with best_effort("queueing the verify cost calibration", a.engine.stats()):
        return a.idle_queue.push(CALIBRATE_KIND, "verify cost", None)
    return False


def measure_in_idle(engine: Engine) -> int | None:
    """Measure and store the curve if still needed (the caller holds the engine's lock): the
    tokens this run computed, or None when nothing ran. Raises ``MeasuringStopped`` when a
    foreground call or the idle budget stopped it (nothing stored; the timed forwards kept)."""
    config = engine.config
    max_k = IDLE_MEASURE["max_k"]
    limit = context_limit(engine.model)
    engine.follow_model()  # the curve is stored under the weights in use now
    if not calibration_needed(engine, config) or (limit is not None and limit < 2 * (max_k + 1)):
        return None
    cached = fit_cached(engine.model, IDLE_MEASURE["cached_tokens"], max_k)
    before = engine.drafts.calibration_totals()["tokens"]
    engine.drafts.measure(engine.fingerprint, config, engine.stats(), cached_tokens=cached, max_k=max_k,
                          repeats=IDLE_MEASURE["repeats"], should_stop=interrupt_check(engine.preemption))
    return engine.drafts.calibration_totals()["tokens"] - before


def calibrate(c: IdleContext, task: IdleTask, report: IdleReport) -> GenerationStats | None:
    """The ``calibrate`` task: the stats to account (its tokens as computed), or None when
    nothing was needed (counted in ``report.skipped_by_kind``)."""
    tokens = c.calibrate()
    if tokens is None:
        report.skipped_by_kind[CALIBRATE_KIND] = report.skipped_by_kind.get(CALIBRATE_KIND, 0) + 1
        return None
    return GenerationStats(tokens_computed=tokens)
