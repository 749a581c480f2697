"""The ask() pipeline: QA bank, then retrieval and generation through the K/V reuse path."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..segments import Segment
from ..stats import GenerationStats

if TYPE_CHECKING:
    from ..core.query import Query
    from ..rag.chunking import Chunk
    from .assistant import Assistant

__all__ = ["Answer", "ask", "generate_answer", "segments_for"]


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


def _ordered(chunks: Sequence[Chunk]) -> list[Chunk]:
    # A canonical order (document, then position) turns different questions that retrieve the
    # same chunks into the same prompt prefix: exact K/V reuse instead of shifted.
    return sorted(chunks, key=lambda c: (c.doc_id, c.index, c.id))


def segments_for(system_prompt: str, query: str, chunks: Sequence[Chunk]) -> list[Segment]:
    """The prompt of ``query`` over the given chunks, as ask() builds it (the chunks are used
    as given: they need not come from the knowledge bank)."""
    return [Segment(system_prompt, "system"),
            *(Segment(c.text, "chunk", id=c.id) for c in _ordered(chunks)), Segment(query, "query")]


def generate_answer(a: Assistant, query: Query, scope: str | None, chunks: list[Chunk] | None = None,
                    *, origin: str = "user", **generate_kwargs: Any) -> Answer:
    """Retrieve (unless ``chunks`` are given), generate, and store the QA entry."""
    t0 = time.perf_counter()
    if chunks is None:
        chunks = a.hooks.retrieve(a.ctx, query, a.config.top_k, scope)
    ordered = _ordered(chunks)
    sources = tuple(c.id for c in ordered)
    generate_kwargs.setdefault("do_sample", False)
    gen = a.engine.generate(segments_for(a.config.system_prompt, query.text, ordered), **generate_kwargs)
    text = gen.text.strip()
    a.hooks.qa_store(a.ctx, query, text, scope, sources, origin)
    return Answer(text, "generated", sources, stats=gen.stats, latency_s=time.perf_counter() - t0)


def ask(a: Assistant, query: Query, scope: str | None = None, **generate_kwargs: Any) -> Answer:
    """QA-bank lookup; on a miss, retrieve top-k chunks and generate through the reuse path.

    Everything goes through hooks: retrieval, the QA lookup and the QA store; the question is
    embedded at most once (``query.embedding``)."""
    t0 = time.perf_counter()
    chunks = a.hooks.retrieve(a.ctx, query, a.config.top_k, scope)
    result = a.hooks.qa_lookup(a.ctx, query, scope, [c.id for c in chunks])
    if result is not None and result.match is not None:
        entry = result.match.entry
        # Serve the stored answer now; compute this question's own answer in idle time.
        if entry.question.strip().lower() != query.text.strip().lower():
            a.idle_queue.push("answer", query.text, scope)
        return Answer(entry.answer or "", "qa_bank", entry.sources, entry.question,
                      result.match.similarity, latency_s=time.perf_counter() - t0)
    answer = generate_answer(a, query, scope, chunks, **generate_kwargs)
    answer.rejected_by = result.rejected_by if result is not None else None
    answer.latency_s = time.perf_counter() - t0
    return answer
