"""Idle-time work: what each task does, how the scheduler trades compute for storage, and
what it cost (PerCache 4.3)."""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from ..core.preemption import Preempted
from ..hooks.specs import hookimpl
from ..idle import IdleReport, IdleTask
from ..predict.parse import parse_questions
from ..predict.templates import load_template
from ..rag.qa_types import ALL_SCOPES
from ..segments import Segment
from ..stats import GenerationStats
from .ask import segments_for
from .disputes import contradicts

if TYPE_CHECKING:
    from ..hooks.contexts import AssistantContext
    from .assistant import Assistant
    from .idle_context import IdleContext

__all__ = ["BUILTIN_TASKS", "BuiltinIdleTasks", "TaskRunner", "BackgroundStats", "TaskCost", "Preempted",
           "run_idle", "population_mode", "round_seed", "queue_conversions", "after_documents",
           "after_question", "queue_knowledge_predictions", "spread"]

log = logging.getLogger("percache")

_ABSTRACT_SYSTEM = "You summarize the user's notes."
_PREDICT_SYSTEM = "You help a personal assistant anticipate the user's questions."


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
CHUNK_TASK = "chunk "  # a knowledge prediction about one chunk: "chunk <id>", round 1
ROUND_TASK = "chunk {id} round {r}"  # later rounds sample other questions


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
    """New chunks: predict questions about them, then update the scope's abstract, after the
    quiet period (an explicit ``idle()`` does not wait for it)."""
    if a.config.predict in ("knowledge", "both") and chunk_ids:
        a.prediction_state.add_pending(scope, chunk_ids)
        quiet = a.config.prediction_quiet_s
        queue_knowledge_predictions(a, scope, chunk_ids, delay_s=quiet)
        a.idle_queue.push("abstract", "", scope, delay_s=quiet)


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
            if chunks and not a.engine.kv_cached(segments_for(a.config.system_prompt, e.question, chunks)):
                queued += a.idle_queue.push("reprefill", e.question, e.scope)
    return queued


# -- task runners ------------------------------------------------------------------------------
def _account(c: IdleContext, report: IdleReport, kind: str, stats: GenerationStats | None) -> None:
    if stats is None:
        return
    cost = c.background_stats.by_kind.setdefault(kind, TaskCost())
    flops = 2.0 * c.n_parameters * (stats.tokens_computed + stats.new_tokens)
    cost.prefill_tokens += stats.tokens_computed
    cost.decode_tokens += stats.new_tokens
    cost.flops += flops
    report.prefill_tokens += stats.tokens_computed
    report.decode_tokens += stats.new_tokens
    report.flops += flops


def _abstract(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    state = c.prediction_state
    pending = state.pending(task.scope)
    if not pending:
        return
    picked = spread(pending, c.ctx.config.abstract_max_chunks)
    instruction = load_template("abstract", c.ctx.config.prompt_dir)
    notes = [state.abstract(task.scope)] if state.abstract(task.scope) else []
    step = c.ctx.config.abstract_batch_chunks
    for i in range(0, len(picked), step):
        chunks = c.ctx.hooks.resolve_chunks(c.ctx, picked[i:i + step])
        if chunks is None:
            continue  # no plugin knows these chunks any more
        segs = [Segment(_ABSTRACT_SYSTEM, "system"), *(Segment(c.text, "chunk", id=c.id) for c in chunks),
                Segment(instruction, "query")]
        gen = c.generate(segs, max_new_tokens=c.ctx.config.background_max_new_tokens, do_sample=False)
        _account(c, report, "abstract", gen.stats)
        notes.append(gen.text.strip())
    words = " ".join(notes).split()
    state.set_abstract(task.scope, " ".join(words[-c.ctx.config.abstract_max_words:]))
    state.clear_pending(task.scope, pending)


def round_seed(task: IdleTask, source: str) -> int:
    """The sampling seed of a prediction round: stable across processes (Python's own str hash
    is randomized per process, so it would make predictions unrepeatable)."""
    key = json.dumps([task.kind, task.question, task.scope, source])
    return zlib.crc32(key.encode("utf-8"))


class _StopAtBlankLine(StoppingCriteria):
    """Stops a prediction at the first blank line after some text: the questions are one per
    line, and what a small model writes after them (another "Note: ...") is wasted decoding."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.start: int | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        if self.start is None:
            self.start = input_ids.shape[1] - 1
        text = self.tokenizer.decode(input_ids[0, self.start:].tolist(), skip_special_tokens=True)
        done = "\n\n" in text.lstrip()
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool,  # type: ignore[return-value]
                          device=input_ids.device)


def _knowledge_source(c: IdleContext, task: IdleTask) -> tuple[str, bool]:
    """The note a knowledge prediction asks about (``""`` if it is gone), and whether this
    round samples (later rounds) rather than decoding greedily (the first)."""
    if not task.question.startswith(CHUNK_TASK):  # an older queue entry: the abstract
        return c.prediction_state.abstract(task.scope), True
    cid, _, later = task.question[len(CHUNK_TASK):].partition(" round ")
    chunks = c.ctx.hooks.resolve_chunks(c.ctx, (cid,))
    return (chunks[0].text if chunks else ""), bool(later)


def _predict(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    n = c.ctx.config.prediction_stride
    if task.kind == "predict_knowledge":
        source, sample = _knowledge_source(c, task)
        template = load_template("knowledge_questions", c.ctx.config.prompt_dir)
        prompt = template.format_map({"note": source, "abstract": source, "n": n})
    else:
        recent = c.prediction_state.history(task.scope)[-5:]
        source, sample = "\n".join(recent), True
        prompt = load_template("history_questions", c.ctx.config.prompt_dir).format(history=source, n=n)
    if not source:
        return
    segments = [Segment(_PREDICT_SYSTEM, "system"), Segment(prompt, "query")]
    max_new = min(c.ctx.config.background_max_new_tokens * 2, 16 * n + 8)  # ~16 tokens a question
    stop = StoppingCriteriaList([_StopAtBlankLine(c.tokenizer)])
    if sample:  # each round samples differently (seeded, so runs repeat)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(round_seed(task, source))
            gen = c.generate(segments, max_new_tokens=max_new, do_sample=True,
                                    temperature=0.8, top_p=0.95, stopping_criteria=stop)
    else:
        gen = c.generate(segments, max_new_tokens=max_new, do_sample=False,
                                stopping_criteria=stop)
    _account(c, report, task.kind, gen.stats)
    kept: list[str] = []
    vectors: list[np.ndarray] = []
    for q in parse_questions(gen.text, limit=n):
        query = c.ctx.query(q)
        vec = query.embedding
        if any(float(vec @ v) >= c.ctx.config.similarity_threshold for v in vectors):
            continue  # a near-duplicate of another prediction
        if c.ctx.config.use_qa_bank and c.ctx.hooks.qa_known(c.ctx, query, task.scope):
            continue  # the bank already holds it (a person or date swap is a new question)
        kept.append(q)
        vectors.append(vec)
        c.ctx.idle_queue.push("populate", q, task.scope)
    report.predicted.extend(kept)


def _populate(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    full = population_mode(c.ctx) == "full" or not c.ctx.config.use_kv
    query = c.ctx.query(task.question)
    if full and c.ctx.config.use_qa_bank:
        ans = c.answer(query, task.scope, origin="predicted",
                              max_new_tokens=c.ctx.config.background_max_new_tokens)
        _account(c, report, "populate", ans.stats)
        return
    chunks = c.ctx.hooks.retrieve(c.ctx, query, c.ctx.config.top_k, task.scope)
    pre = c.prefill(segments_for(c.ctx.config.system_prompt, task.question, chunks))
    _account(c, report, "populate", pre.stats)
    c.ctx.hooks.qa_store(c.ctx, query, None, task.scope, [c.id for c in chunks], "predicted")


def _decode(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    ans = c.answer(c.ctx.query(task.question), task.scope, origin="predicted",
                          max_new_tokens=c.ctx.config.background_max_new_tokens)
    _account(c, report, task.kind, ans.stats)


def _reprefill(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    entries = c.ctx.hooks.qa_entries(c.ctx, task.scope, task.question)
    chunks = c.ctx.hooks.resolve_chunks(c.ctx, entries[0].sources) if entries and entries[0].sources else None
    if chunks:
        pre = c.prefill(segments_for(c.ctx.config.system_prompt, task.question, chunks))
        _account(c, report, task.kind, pre.stats)


def _answer(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    """The question's own answer. For a question served from the QA bank, an answer that
    contradicts the one served puts both, and their paraphrases, out of service until resolved."""
    query = c.ctx.query(task.question)
    served = [] if task.kind != "answer" else [
        e for e in c.served_paraphrases(query, task.scope)
        if e.question.strip().lower() != task.question.strip().lower()]
    ans = c.answer(query, task.scope, max_new_tokens=c.ctx.config.background_max_new_tokens)
    _account(c, report, task.kind, ans.stats)
    if served and served[0].origin != "corrected" and contradicts(served[0].answer, ans.text):
        report.disputed += c.dispute(served[0])


TaskRunner = Callable[["IdleContext", IdleTask, IdleReport], None]

BUILTIN_TASKS: dict[str, TaskRunner] = {
    "answer": _answer, "refresh": _answer, "abstract": _abstract,
    "predict_knowledge": _predict, "predict_history": _predict,
    "populate": _populate, "decode": _decode, "reprefill": _reprefill,
}


class BuiltinIdleTasks:
    """Registers the built-in idle task kinds (a plugin; replace a kind by registering it again)."""

    @hookimpl(tryfirst=True)
    def percache_register_idle_tasks(self, register: Callable[[str, TaskRunner], None]) -> None:
        for kind, runner in BUILTIN_TASKS.items():
            register(kind, runner)


def run_task(a: Assistant, task: IdleTask, report: IdleReport) -> None:
    """Run one task; it leaves the queue only if it finished (not on error or preemption)."""
    if task.kind not in a.task_runners:  # queued by a plugin that is gone: drop it, say so
        log.warning("percache: dropping idle task of unregistered kind %r", task.kind)
        a.idle_queue.done(task)
        return
    a.task_runners[task.kind](a.idle_context, task, report)
    a.idle_queue.done(task)
    cost = a.background_stats.by_kind.setdefault(task.kind, TaskCost())
    cost.tasks += 1
    report.tasks_run += 1
    report.by_kind[task.kind] = report.by_kind.get(task.kind, 0) + 1


def run_idle(a: Assistant, budget_s: float | None = None, max_tasks: int | None = None, *,
             ignore_quiet: bool = False,
             on_task: Callable[[IdleTask], None] | None = None) -> IdleReport:
    """Run runnable tasks, oldest first, until none is left, ``max_tasks`` ran or ``budget_s``
    is spent. The budget is checked between tasks and after every decoded token, so the call
    ends at most one decode step (or one uninterruptible prefill) after it; the interrupted
    task stays queued. ``ignore_quiet`` runs tasks still in their quiet period; ``on_task`` is
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
