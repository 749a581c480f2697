"""The ask() pipeline: QA bank, then retrieval and generation through the K/V reuse path."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .idle import IdleReport, IdleTask
from .segments import Segment
from .stats import GenerationStats

if TYPE_CHECKING:
    from .engine import PerCache
    from .rag.chunking import Chunk

__all__ = ["Answer", "ask", "generate_answer", "run_idle"]


@dataclass
class Answer:
    """The result of :meth:`PerCache.ask`.

    :ivar text: the answer.
    :ivar source: ``"qa_bank"`` (a stored answer, no inference) or ``"generated"``.
    :ivar sources: ids of the chunks behind the answer.
    :ivar matched_question: the stored question served (QA-bank hits).
    :ivar similarity: its cosine similarity to the question (QA-bank hits).
    :ivar rejected_by: on generation, why the closest stored question was not served.
    :ivar stats: the generation's stats (None for QA-bank hits).
    :ivar latency_s: wall time of the whole call.
    """

    text: str
    source: Literal["qa_bank", "generated"]
    sources: tuple[str, ...]
    matched_question: str | None = None
    similarity: float | None = None
    rejected_by: str | None = None
    stats: GenerationStats | None = None
    latency_s: float = 0.0


def _check_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"the question must be a non-empty str, got {query!r}")
    return query


def _ordered(chunks: list[Chunk]) -> list[Chunk]:
    # A canonical order (document, then position) turns different questions that retrieve the
    # same chunks into the same prompt prefix: exact K/V reuse instead of shifted.
    return sorted(chunks, key=lambda c: (c.doc_id, c.index, c.id))


def generate_answer(pc: PerCache, query: str, scope: str | None, chunks: list[Chunk] | None = None,
                    **generate_kwargs: Any) -> Answer:
    """Retrieve (unless ``chunks`` are given), generate, and store the QA entry."""
    t0 = time.perf_counter()
    if chunks is None:
        chunks = pc.hooks.retrieve(pc, query, pc.config.top_k, scope)
    chunks = _ordered(chunks)
    segments = [Segment(pc.config.system_prompt, "system"),
                *(Segment(c.text, "chunk", id=c.id) for c in chunks), Segment(query, "query")]
    generate_kwargs.setdefault("do_sample", False)
    gen = pc.generate(segments, **generate_kwargs)
    text = gen.text.strip()
    sources = tuple(c.id for c in chunks)
    pc.hooks.qa_store(pc, query, text, scope, sources)
    return Answer(text, "generated", sources, stats=gen.stats, latency_s=time.perf_counter() - t0)


def ask(pc: PerCache, query: str, scope: str | None = None, **generate_kwargs: Any) -> Answer:
    """QA-bank lookup; on a miss, retrieve top-k chunks and generate through the reuse path."""
    t0 = time.perf_counter()
    query = _check_query(query)
    chunks = pc.hooks.retrieve(pc, query, pc.config.top_k, scope)
    result = pc.hooks.qa_lookup(pc, query, scope, [c.id for c in chunks])
    if result is not None and result.match is not None:
        entry = result.match.entry
        # Serve the stored answer now; compute this question's own answer in idle time.
        if entry.question.strip().lower() != query.strip().lower():
            pc.idle_queue.push("answer", query, scope)
        return Answer(entry.answer or "", "qa_bank", entry.sources, entry.question,
                      result.match.similarity, latency_s=time.perf_counter() - t0)
    answer = generate_answer(pc, query, scope, chunks, **generate_kwargs)
    answer.rejected_by = result.rejected_by if result is not None else None
    answer.latency_s = time.perf_counter() - t0
    return answer


def _run_task(pc: PerCache, task: IdleTask, report: IdleReport, **generate_kwargs: Any) -> None:
    answer = generate_answer(pc, task.question, task.scope, **generate_kwargs)
    if answer.stats is not None:
        report.prefill_tokens += answer.stats.tokens_computed
        report.decode_tokens += answer.stats.new_tokens


def run_idle(pc: PerCache, budget_s: float | None = None, max_tasks: int | None = None,
             **generate_kwargs: Any) -> IdleReport:
    """Run queued tasks, oldest first, until the queue is empty, ``max_tasks`` ran, or the
    ``budget_s`` is spent (checked between tasks). A task leaves the queue only when done."""
    t0 = time.perf_counter()
    report = IdleReport()
    while max_tasks is None or report.tasks_run < max_tasks:
        if budget_s is not None and time.perf_counter() - t0 >= budget_s:
            break
        task = pc.idle_queue.peek()
        if task is None:
            break
        _run_task(pc, task, report, **generate_kwargs)
        pc.idle_queue.done(task)
        report.tasks_run += 1
        report.by_kind[task.kind] = report.by_kind.get(task.kind, 0) + 1
    report.seconds = time.perf_counter() - t0
    report.remaining = len(pc.idle_queue)
    return report
