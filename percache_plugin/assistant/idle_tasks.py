"""The idle task kinds built in: what each task does (abstract, predict, populate, decode,
re-prefill, answer, warm, calibrate) and what it cost. Each runner receives the assistant's
:class:`~percache_plugin.assistant.idle_context.IdleContext`; :class:`BuiltinIdleTasks`
registers them (a plugin: registering a kind again replaces it)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from ..decode.calibrate import MeasuringStopped
from ..hooks.specs import hookimpl
from ..idle import IdleReport, IdleTask
from ..plugins.removal import forget_chunks
from ..predict.parse import parse_questions
from ..predict.state import REBUILD_ABSTRACT, task_chunk
from ..predict.templates import load_template
from ..segments import Segment
from ..stats import GenerationStats
from .ask import segments_for
from .calibrate_task import CALIBRATE_KIND, calibrate
from .disputes import contradicts
from .scheduler import TaskCost, population_mode, spread
from .warm import WARM_KIND, warm_chunk

if TYPE_CHECKING:
    from .idle_context import IdleContext

__all__ = ["BUILTIN_TASKS", "BuiltinIdleTasks", "TaskRunner", "round_seed"]

_ABSTRACT_SYSTEM = "You summarize the user's notes."
_PREDICT_SYSTEM = "You help a personal assistant anticipate the user's questions."


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
    rebuild = task.question == REBUILD_ABSTRACT
    if rebuild:  # chunks it was built from were removed: from what the scope holds now, in order
        state.clear_pending(task.scope, state.pending(task.scope))
        state.add_pending(task.scope, _scope_chunks(c, task.scope))
    pending = state.pending(task.scope)
    if not pending:
        return
    picked = spread(pending, c.ctx.config.abstract_max_chunks)
    instruction = load_template("abstract", c.ctx.config.prompt_dir)
    notes = [state.abstract(task.scope)] if state.abstract(task.scope) and not rebuild else []
    step = c.ctx.config.abstract_batch_chunks
    used: list[str] = []
    for i in range(0, len(picked), step):
        chunks = c.ctx.hooks.resolve_chunks(c.ctx, picked[i:i + step])
        if chunks is None:
            continue  # no plugin knows these chunks any more
        segs = [Segment(_ABSTRACT_SYSTEM, "system"), *(Segment(c.text, "chunk", id=c.id) for c in chunks),
                Segment(instruction, "query")]
        gen = c.generate(segs, max_new_tokens=c.ctx.config.background_max_new_tokens, do_sample=False,
                         scope=task.scope)
        _account(c, report, "abstract", gen.stats)
        notes.append(gen.text.strip())
        used += [ch.id for ch in chunks]
    words = " ".join(notes).split()
    state.set_abstract(task.scope, " ".join(words[-c.ctx.config.abstract_max_words:]), used,
                       continued=not rebuild)
    state.clear_pending(task.scope, pending)
    _forget_gone(c, used)


def _forget_gone(c: IdleContext, ids: Sequence[str]) -> None:
    """Another handle or process may have removed chunks this task read while it generated,
    and dropped their predictions before this task recorded its own, and their K/V before its
    prompt stored it (the abstract's): forget them now (after recording them, so either this
    check or that removal sees them; ``forget_chunks``, journaled)."""
    gone = [i for i in dict.fromkeys(ids) if not c.ctx.hooks.resolve_chunks(c.ctx, [i])]
    if gone:
        forget_chunks(c.ctx, gone)


def _scope_chunks(c: IdleContext, scope: str | None) -> list[str]:
    """The ids of the chunks of ``scope`` (of it alone, whatever a plugin's listing holds)."""
    chunks = c.ctx.hooks.resolve_chunks(c.ctx, c.ctx.hooks.list_chunks(c.ctx, scope)) or []
    return [ch.id for ch in chunks if ch.scope == scope]


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
    named = task_chunk(task.question)
    if named is None:  # an older queue entry: the abstract
        return c.prediction_state.abstract(task.scope), True
    chunks = c.ctx.hooks.resolve_chunks(c.ctx, (named[0],))
    return (chunks[0].text if chunks else ""), named[1]


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
        gen = c.generate(segments, max_new_tokens=max_new, do_sample=True, temperature=0.8,
                         top_p=0.95, stopping_criteria=stop, seed=round_seed(task, source))
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
    named = task_chunk(task.question) if task.kind == "predict_knowledge" else None
    if named is not None and kept:  # asked about this chunk: they go when it goes
        c.prediction_state.note_predicted(task.scope, named[0], kept)
        _forget_gone(c, [named[0]])
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
    # the entry first: the prefill's check of its chunks afterwards then sees it too
    failed = c.ctx.hooks.qa_store(c.ctx, query, None, task.scope, [c.id for c in chunks], "predicted")
    pre = c.prefill(segments_for(c.ctx.config.system_prompt, task.question, chunks), scope=task.scope)
    pre.stats.plugin_errors += failed  # a cache write: logged, the prefill stands
    c.totals.plugin_errors += failed  # the prefill's own failures reached them when it ended
    _account(c, report, "populate", pre.stats)


def _decode(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    ans = c.answer(c.ctx.query(task.question), task.scope, origin="predicted",
                          max_new_tokens=c.ctx.config.background_max_new_tokens)
    _account(c, report, task.kind, ans.stats)


def _reprefill(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    entries = c.ctx.hooks.qa_entries(c.ctx, task.scope, task.question)
    chunks = c.ctx.hooks.resolve_chunks(c.ctx, entries[0].sources) if entries and entries[0].sources else None
    if chunks:
        pre = c.prefill(segments_for(c.ctx.config.system_prompt, task.question, chunks), scope=task.scope)
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
    if served and ans.source == "generated" and served[0].origin != "corrected" \
            and contradicts(served[0].answer, ans.text):
        report.disputed += c.dispute(served[0])


def _warm(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    _account(c, report, WARM_KIND, warm_chunk(c, task, report))


def _calibrate(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
    try:
        stats = calibrate(c, task, report)
    except MeasuringStopped as stop:  # a stopped run computed too (its timed forwards are kept)
        _account(c, report, CALIBRATE_KIND, GenerationStats(tokens_computed=stop.tokens))
        raise
    _account(c, report, CALIBRATE_KIND, stats)


TaskRunner = Callable[["IdleContext", IdleTask, IdleReport], None]

BUILTIN_TASKS: dict[str, TaskRunner] = {
    "answer": _answer, "refresh": _answer, "abstract": _abstract,
    "predict_knowledge": _predict, "predict_history": _predict,
    "populate": _populate, "decode": _decode, "reprefill": _reprefill, WARM_KIND: _warm,
    CALIBRATE_KIND: _calibrate,
}


class BuiltinIdleTasks:
    """Registers the built-in idle task kinds (a plugin; replace a kind by registering it again)."""

    @hookimpl(tryfirst=True)
    def percache_register_idle_tasks(self, register: Callable[[str, TaskRunner], None]) -> None:
        for kind, runner in BUILTIN_TASKS.items():
            register(kind, runner)
