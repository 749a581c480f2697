"""Idle-time scheduling: what triggers idle work, how the scheduler trades compute for storage
(PerCache 4.3), running queued tasks under a budget, and what they cost. The task kinds
themselves are in :mod:`percache_plugin.assistant.idle_tasks`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.preemption import Preempted
from ..idle import IdleReport, IdleTask
from ..predict.state import CHUNK_TASK, ROUND_TASK
from ..rag.qa_types import ALL_SCOPES
from .ask import segments_for
from .warm import queue_warm

if TYPE_CHECKING:
    from ..hooks.contexts import AssistantContext
    from .assistant import Assistant

__all__ = ["BackgroundStats", "TaskCost", "run_idle", "run_task", "population_mode", "queue_conversions",
           "after_documents", "after_question", "queue_knowledge_predictions", "spread"]

log = logging.getLogger("percache")


@dataclass
class TaskCost:
    """Background compute of one task kind: tasks run, prompt tokens computed, tokens decoded,
    and FLOPs estimated as ``2 * parameters * tokens``."""

    tasks: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    flops: float = 0.0


@dataclass
class BackgroundStats:
    """Background compute per task kind, summed over the handle's lifetime."""

    by_kind: dict[str, TaskCost] = field(default_factory=dict)

    @property
    def total(self) -> TaskCost:
        t = TaskCost()
        for c in self.by_kind.values():
            t.tasks += c.tasks
            t.prefill_tokens += c.prefill_tokens
            t.decode_tokens += c.decode_tokens
            t.flops += c.flops
        return t


def population_mode(a: Assistant | AssistantContext) -> str:
    """``"prefill"`` when tau is above the cutoff (QA hits will be rare: store only chunk K/V and
    an answerless entry), else ``"full"`` (decode the answer too)."""
    return "prefill" if a.config.similarity_threshold > a.config.population_cutoff else "full"


# -- triggers ----------------------------------------------------------------------------------


def spread(items: list[str], n: int) -> list[str]:
    """At most ``n`` items spread evenly over ``items`` (first and last included)."""
    if len(items) <= n:
        return list(items)
    return list(dict.fromkeys(items[int(i)] for i in np.linspace(0, len(items) - 1, n).round()))


def queue_knowledge_predictions(a: Assistant, scope: str | None, chunk_ids: list[str], *,
                                delay_s: float = 0.0, rounds: int | None = None) -> int:
    """Queue questions about each of (at most ``abstract_max_chunks``, spread evenly) chunks,
    ``knowledge_rounds`` rounds each: a small model asked about one note at a time, with an
    example, finds the names, dates and decisions in it; asked about a summary of many notes,
    it mostly did not (SmolLM2-135M: "1. Project Manager: 2. Project Manager: ...")."""
    queued = 0
    for r in range(a.config.knowledge_rounds if rounds is None else rounds):
        for cid in spread(chunk_ids, a.config.abstract_max_chunks):
            name = CHUNK_TASK + cid if r == 0 else ROUND_TASK.format(id=cid, r=r + 1)
            queued += a.idle_queue.push("predict_knowledge", name, scope, delay_s=delay_s)
    return queued


def after_documents(a: Assistant, scope: str | None, chunk_ids: list[str]) -> None:
    """New chunks: predict questions about them, then update the scope's abstract, then store
    their K/V (``Config.kv_warm``), after the quiet period (an explicit ``idle()`` does not wait
    for it)."""
    if a.config.predict in ("knowledge", "both") and chunk_ids:
        a.prediction_state.add_pending(scope, chunk_ids)
        quiet = a.config.prediction_quiet_s
        queue_knowledge_predictions(a, scope, chunk_ids, delay_s=quiet)
        a.idle_queue.push("abstract", "", scope, delay_s=quiet)
    queue_warm(a, scope, chunk_ids, delay_s=a.config.prediction_quiet_s)


def after_question(a: Assistant, query: str, scope: str | None) -> None:
    if a.config.predict == "off":
        return
    a.prediction_state.remember(scope, query)
    if a.config.predict in ("history", "both"):
        a.idle_queue.push("predict_history", "", scope, delay_s=a.config.prediction_quiet_s)


def queue_conversions(a: Assistant, old: Any, new: Any) -> int:
    """After ``a.configure``: K/V -> QA when tau drops to the cutoff or below (decode answerless
    entries); QA -> K/V when the K/V byte limit grows (re-prefill evicted chunks)."""
    queued = 0
    if not a.config.use_qa_bank:
        return 0
    entries = a.hooks.qa_entries(a.ctx, ALL_SCOPES)
    if population_mode(a) == "full":
        for e in entries:
            if e.answer is None:
                queued += a.idle_queue.push("decode", e.question, e.scope)
    grew = new.kv_byte_limit is None or (old.kv_byte_limit is not None and new.kv_byte_limit > old.kv_byte_limit)
    if grew and a.config.use_kv:
        for e in entries:
            chunks = a.hooks.resolve_chunks(a.ctx, e.sources) if e.sources else None
            if chunks and not a.engine.kv_cached(segments_for(a.config.system_prompt, e.question, chunks), e.scope):
                queued += a.idle_queue.push("reprefill", e.question, e.scope)
    return queued


def run_task(a: Assistant, task: IdleTask, report: IdleReport) -> None:
    """Run one task; it leaves the queue only if it finished (not on error or preemption; a
    failed task waits a growing back-off before it is runnable again, ``IdleQueue.failed``).
    A task whose runner counted itself in ``report.skipped_by_kind`` (nothing to do) leaves
    the queue but is not counted as run."""
    if task.kind not in a.task_runners:  # queued by a plugin that is gone: drop it, say so
        log.warning("percache: dropping idle task of unregistered kind %r", task.kind)
        a.idle_queue.done(task)
        return
    skipped = sum(report.skipped_by_kind.values())
    try:
        a.task_runners[task.kind](a.idle_context, task, report)
    except Preempted:
        raise
    except Exception:
        delay = a.idle_queue.failed(task)
        log.warning("percache: idle task %s %r failed; retried in %.0f s", task.kind, task.question, delay)
        raise
    a.idle_queue.done(task)
    if sum(report.skipped_by_kind.values()) > skipped:
        return
    cost = a.background_stats.by_kind.setdefault(task.kind, TaskCost())
    cost.tasks += 1
    report.tasks_run += 1
    report.by_kind[task.kind] = report.by_kind.get(task.kind, 0) + 1


def run_idle(a: Assistant, budget_s: float | None = None, max_tasks: int | None = None, *,
             ignore_quiet: bool = False,
             on_task: Callable[[IdleTask], None] | None = None) -> IdleReport:
    """Run runnable tasks, oldest first, until none is left, ``max_tasks`` ran or ``budget_s``
    is spent. The budget is checked between tasks, between prefill chunks
    (``Config.background_prefill_chunk`` tokens) and after every decoded token, so the call
    ends at most one chunk or one decode step after it; the interrupted task stays queued. ``ignore_quiet`` runs tasks still in their quiet period; ``on_task`` is
    called after each finished task (progress)."""
    t0 = time.perf_counter()
    report = IdleReport()
    preemption = a.engine.preemption
    preemption.deadline = None if budget_s is None else t0 + budget_s
    try:
        while True:
            if max_tasks is not None and report.tasks_run >= max_tasks:
                report.stopped_by = "max_tasks"
                break
            if budget_s is not None and time.perf_counter() - t0 >= budget_s:
                report.stopped_by = "budget"
                break
            task = a.idle_queue.peek(ignore_quiet=ignore_quiet)
            if task is None:
                break
            try:
                run_task(a, task, report)
                if on_task is not None:
                    on_task(task)
            except Preempted:
                report.preempted += 1
                over = budget_s is not None and time.perf_counter() - t0 >= budget_s
                report.stopped_by = "budget" if over else "preempted"
                break
    finally:
        preemption.deadline = None
    report.seconds = time.perf_counter() - t0
    report.remaining_by_kind = a.idle_queue.counts()
    report.remaining = sum(report.remaining_by_kind.values())
    return report
