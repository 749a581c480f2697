"""Warming the K/V store with the user's documents in idle time (``Config.kv_warm``).

Idle-time population prefills only the chunks retrieved for predicted questions, so the chunks
retrieved for a real question are often not stored anywhere and the request computes them. The
documents themselves are known in advance: the ``warm`` task prefills each new chunk once, as
``[system, chunk, query]`` (the query is a placeholder: the last piece is never stored), so the
chunk's K/V is stored right after the system prompt, keyed in the scope the document was added
to (the chain that scope's asks look up). A later prompt whose first retrieved chunk
is that one reuses it exactly; the other retrieved chunks are found by their tokens and reused
shifted (``Config.reuse='shifted'``, with the positions ``Config.recompute`` chooses computed
again; approximate, counted in ``GenerationStats.tokens_shifted``).

Order: the chunks most likely to be retrieved first, estimated as the cosine of a chunk's
vector to the mean vector of the batch's chunks (a central chunk shares words with many
questions), so an idle period cut short has warmed the likeliest ones. One task per chunk,
preempted like the other background prefills; a task that finds the store holding
``Config.kv_warm_max_share`` of ``kv_byte_limit`` already in use is skipped (warming stops
there, so it does not evict what requests stored; counted in ``IdleReport.skipped_by_kind``,
not as a task run). The cost is counted under the ``warm`` kind of the background stats.
On by default; ``kv_warm=False`` turns it off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..idle import IdleReport, IdleTask
from ..stats import GenerationStats
from .ask import segments_for

if TYPE_CHECKING:
    from ..rag.chunking import Chunk
    from .assistant import Assistant
    from .idle_context import IdleContext

__all__ = ["WARM_KIND", "WARM_QUERY", "likely_first", "queue_warm", "warm_chunk"]

WARM_KIND = "warm"
WARM_QUERY = "?"
"""The query segment of a warming prompt: the last piece, which is never stored."""


def likely_first(chunks: list[Chunk], vectors: dict[str, np.ndarray]) -> list[str]:
    """Chunk ids, most central first (cosine to the mean of the chunks' unit vectors; chunks
    without a vector last, in their given order). Ties keep the given order."""
    have = [c for c in chunks if c.id in vectors]
    rest = [c.id for c in chunks if c.id not in vectors]
    if not have:
        return rest
    mat = np.stack([np.asarray(vectors[c.id], dtype=np.float64) for c in have])
    mat /= np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
    score = mat @ mat.mean(axis=0)
    order = sorted(range(len(have)), key=lambda i: (-score[i], i))
    return [have[i].id for i in order] + rest


def queue_warm(a: Assistant, scope: str | None, chunk_ids: list[str], *, delay_s: float = 0.0) -> int:
    """Queue one ``warm`` task per new chunk, most likely retrieved first; returns how many
    were queued (none when ``kv_warm`` or ``use_kv`` is off)."""
    if not (a.config.kv_warm and a.config.use_kv) or not chunk_ids:
        return 0
    chunks = a.hooks.resolve_chunks(a.ctx, chunk_ids) or []
    order = likely_first(chunks, a.hooks.chunk_vectors(a.ctx, chunks)) if chunks else list(chunk_ids)
    return sum(a.idle_queue.push(WARM_KIND, cid, scope, delay_s=delay_s) for cid in order)


def warm_chunk(c: IdleContext, task: IdleTask, report: IdleReport) -> GenerationStats | None:
    """Prefill ``[system, chunk, query]`` for the chunk named by the task, storing the chunk's
    K/V after the system prompt, exactly (a chunk stored there already is served, not computed
    again; a copy stored elsewhere is not used).
    Returns the prefill's stats, or None when nothing ran: warming or K/V off, the chunk gone,
    or the store already holding ``kv_warm_max_share`` of its byte limit (each counted in
    ``report.skipped_by_kind["warm"]``, not as a task run)."""
    config = c.ctx.config
    chunks = c.ctx.hooks.resolve_chunks(c.ctx, (task.question,)) if config.kv_warm and config.use_kv else None
    limit = config.kv_byte_limit
    # off since it was queued, the chunk forgotten, or the store at warming's share
    if not chunks or (limit is not None and c.ctx.engine.store.total_bytes() >= config.kv_warm_max_share * limit):
        report.skipped_by_kind[WARM_KIND] = report.skipped_by_kind.get(WARM_KIND, 0) + 1
        return None
    # exact_only: a copy of the chunk stored elsewhere (by a summary's or a prediction's
    # prompt) would otherwise be reused shifted, and the approximate result not stored in the tree
    # scope: keyed as the scope's asks look them up
    return c.prefill(segments_for(config.system_prompt, WARM_QUERY, chunks), exact_only=True,
                     scope=task.scope).stats
