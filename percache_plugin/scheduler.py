"""Idle-time work: what each task does, how the scheduler trades compute for storage, and
what it cost (PerCache 4.3)."""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .ask import generate_answer, segments_for
from .idle import IdleReport, IdleTask
from .predict.parse import parse_questions
from .predict.templates import load_template
from .segments import Segment
from .stats import GenerationStats

if TYPE_CHECKING:
    from .engine import PerCache

__all__ = ["BackgroundStats", "TaskCost", "Preempted", "run_idle", "population_mode", "round_seed",
           "queue_conversions", "after_documents", "after_question"]

_ABSTRACT_SYSTEM = "You summarize the user's notes."
_PREDICT_SYSTEM = "You help a personal assistant anticipate the user's questions."


class Preempted(Exception):  # noqa: N818 - a control-flow signal
    """A background task stopped because a foreground request arrived; it stays queued."""


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


def population_mode(pc: PerCache) -> str:
    """``"prefill"`` when tau is above the cutoff (QA hits will be rare: store only chunk K/V and
    an answerless entry), else ``"full"`` (decode the answer too)."""
    return "prefill" if pc.config.similarity_threshold > pc.config.population_cutoff else "full"


# -- triggers ----------------------------------------------------------------------------------
def after_documents(pc: PerCache, scope: str | None, chunk_ids: list[str]) -> None:
    """New chunks: summarize them, then predict questions, after the quiet period."""
    if pc.config.predict in ("knowledge", "both") and chunk_ids:
        pc.prediction_state.add_pending(scope, chunk_ids)
        quiet = pc.config.prediction_quiet_s
        pc.idle_queue.push("abstract", "", scope, delay_s=quiet)
        for r in range(pc.config.knowledge_rounds):
            pc.idle_queue.push("predict_knowledge", f"round {r + 1}", scope, delay_s=quiet)


def after_question(pc: PerCache, query: str, scope: str | None) -> None:
    if pc.config.predict == "off":
        return
    pc.prediction_state.remember(scope, query)
    if pc.config.predict in ("history", "both"):
        pc.idle_queue.push("predict_history", "", scope, delay_s=pc.config.prediction_quiet_s)


def queue_conversions(pc: PerCache, old: Any, new: Any) -> int:
    """After ``pc.configure``: K/V -> QA when tau drops to the cutoff or below (decode answerless
    entries); QA -> K/V when the K/V byte limit grows (re-prefill evicted chunks)."""
    queued = 0
    if not pc.config.use_qa_bank:
        return 0
    if population_mode(pc) == "full":
        for e in pc.qa_bank.entries():
            if e.answer is None:
                queued += pc.idle_queue.push("decode", e.question, e.scope)
    grew = new.kv_byte_limit is None or (old.kv_byte_limit is not None and new.kv_byte_limit > old.kv_byte_limit)
    if grew and pc.config.use_kv:
        for e in pc.qa_bank.entries():
            if e.sources and not pc.kv_cached(segments_for(pc, e.question, e.sources)):
                queued += pc.idle_queue.push("reprefill", e.question, e.scope)
    return queued


# -- task runners ------------------------------------------------------------------------------
def _account(pc: PerCache, report: IdleReport, kind: str, stats: GenerationStats | None) -> None:
    if stats is None:
        return
    cost = pc.background_stats.by_kind.setdefault(kind, TaskCost())
    flops = 2.0 * pc.n_parameters * (stats.tokens_computed + stats.new_tokens)
    cost.prefill_tokens += stats.tokens_computed
    cost.decode_tokens += stats.new_tokens
    cost.flops += flops
    report.prefill_tokens += stats.tokens_computed
    report.decode_tokens += stats.new_tokens
    report.flops += flops


def _abstract(pc: PerCache, task: IdleTask, report: IdleReport) -> None:
    state = pc.prediction_state
    pending = state.pending(task.scope)
    if not pending:
        return
    n = min(len(pending), pc.config.abstract_max_chunks)
    picked = [pending[int(i)] for i in np.linspace(0, len(pending) - 1, n).round().astype(int)]
    picked = list(dict.fromkeys(picked))
    instruction = load_template("abstract", pc.config.prompt_dir)
    notes = [state.abstract(task.scope)] if state.abstract(task.scope) else []
    step = pc.config.abstract_batch_chunks
    for i in range(0, len(picked), step):
        chunks = [pc.knowledge.chunk(c) for c in picked[i:i + step]]
        segs = [Segment(_ABSTRACT_SYSTEM, "system"), *(Segment(c.text, "chunk", id=c.id) for c in chunks),
                Segment(instruction, "query")]
        gen = pc.generate(segs, max_new_tokens=pc.config.background_max_new_tokens, do_sample=False)
        _account(pc, report, "abstract", gen.stats)
        notes.append(gen.text.strip())
    words = " ".join(notes).split()
    state.set_abstract(task.scope, " ".join(words[-pc.config.abstract_max_words:]))
    state.clear_pending(task.scope, pending)


def round_seed(task: IdleTask, source: str) -> int:
    """The sampling seed of a prediction round: stable across processes (Python's own str hash
    is randomized per process, so it would make predictions unrepeatable)."""
    key = json.dumps([task.kind, task.question, task.scope, source])
    return zlib.crc32(key.encode("utf-8"))


def _predict(pc: PerCache, task: IdleTask, report: IdleReport) -> None:
    n = pc.config.prediction_stride
    if task.kind == "predict_knowledge":
        source = pc.prediction_state.abstract(task.scope)
        prompt = load_template("knowledge_questions", pc.config.prompt_dir).format(abstract=source, n=n)
    else:
        recent = pc.prediction_state.history(task.scope)[-5:]
        source = "\n".join(recent)
        prompt = load_template("history_questions", pc.config.prompt_dir).format(history=source, n=n)
    if not source:
        return
    # Each round samples differently (seeded, so runs repeat); greedy would repeat itself.
    seed = round_seed(task, source)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gen = pc.generate([Segment(_PREDICT_SYSTEM, "system"), Segment(prompt, "query")],
                          max_new_tokens=pc.config.background_max_new_tokens * 2,
                          do_sample=True, temperature=0.8, top_p=0.95)
    _account(pc, report, task.kind, gen.stats)
    kept: list[str] = []
    vectors: list[np.ndarray] = []
    for q in parse_questions(gen.text, limit=n):
        vec = pc.query_embedding(q)
        if any(float(vec @ v) >= pc.config.similarity_threshold for v in vectors):
            continue  # a near-duplicate of another prediction
        if pc.config.use_qa_bank:
            best = pc.qa_bank.lookup(q, tau=pc.config.similarity_threshold, scope=task.scope,
                                     embedding=vec).best
            if (best is not None and best.similarity >= pc.config.similarity_threshold
                    and best.guards.get("terms", True)):
                continue  # the bank already holds it (a person or date swap is a new question)
        kept.append(q)
        vectors.append(vec)
        pc.idle_queue.push("populate", q, task.scope)
    report.predicted.extend(kept)


def _populate(pc: PerCache, task: IdleTask, report: IdleReport) -> None:
    full = population_mode(pc) == "full" or not pc.config.use_kv
    if full and pc.config.use_qa_bank:
        ans = generate_answer(pc, task.question, task.scope, origin="predicted",
                              max_new_tokens=pc.config.background_max_new_tokens)
        _account(pc, report, "populate", ans.stats)
        return
    chunks = pc.hooks.retrieve(pc, task.question, pc.config.top_k, task.scope)
    pre = pc.prefill(segments_for(pc, task.question, [c.id for c in chunks]))
    _account(pc, report, "populate", pre.stats)
    pc.hooks.qa_store(pc, task.question, None, task.scope, [c.id for c in chunks], "predicted")


def _decode(pc: PerCache, task: IdleTask, report: IdleReport) -> None:
    ans = generate_answer(pc, task.question, task.scope, origin="predicted",
                          max_new_tokens=pc.config.background_max_new_tokens)
    _account(pc, report, task.kind, ans.stats)


def _reprefill(pc: PerCache, task: IdleTask, report: IdleReport) -> None:
    entries = [e for e in pc.qa_bank.entries(scope=task.scope) if e.question == task.question]
    if entries and entries[0].sources:
        pre = pc.prefill(segments_for(pc, task.question, entries[0].sources))
        _account(pc, report, task.kind, pre.stats)


def _answer(pc: PerCache, task: IdleTask, report: IdleReport) -> None:
    ans = generate_answer(pc, task.question, task.scope,
                          max_new_tokens=pc.config.background_max_new_tokens)
    _account(pc, report, task.kind, ans.stats)


_RUNNERS = {
    "answer": _answer, "refresh": _answer, "abstract": _abstract,
    "predict_knowledge": _predict, "predict_history": _predict,
    "populate": _populate, "decode": _decode, "reprefill": _reprefill,
}


def run_task(pc: PerCache, task: IdleTask, report: IdleReport) -> None:
    """Run one task; it leaves the queue only if it finished (not on error or preemption)."""
    _RUNNERS[task.kind](pc, task, report)
    pc.idle_queue.done(task)
    cost = pc.background_stats.by_kind.setdefault(task.kind, TaskCost())
    cost.tasks += 1
    report.tasks_run += 1
    report.by_kind[task.kind] = report.by_kind.get(task.kind, 0) + 1


def run_idle(pc: PerCache, budget_s: float | None = None, max_tasks: int | None = None) -> IdleReport:
    """Run runnable tasks, oldest first, until none is left, ``max_tasks`` ran or ``budget_s``
    is spent (checked between tasks)."""
    t0 = time.perf_counter()
    report = IdleReport()
    while max_tasks is None or report.tasks_run < max_tasks:
        if budget_s is not None and time.perf_counter() - t0 >= budget_s:
            break
        task = pc.idle_queue.peek()
        if task is None:
            break
        try:
            run_task(pc, task, report)
        except Preempted:
            report.preempted += 1
            break
    report.seconds = time.perf_counter() - t0
    report.remaining = len(pc.idle_queue)
    return report
