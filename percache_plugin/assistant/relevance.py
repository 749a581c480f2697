"""Whether ask() answers at all: the similarity of the question and its best retrieved chunk
against ``Config.relevance_threshold`` (below it, ask() says no relevant documents were found)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from ..rag.embeddings import DEFAULT_MODEL_NAME

if TYPE_CHECKING:
    from ..core.query import Query
    from ..rag.chunking import Chunk
    from .assistant import Assistant

__all__ = ["AUTO_RELEVANCE", "best_relevance", "no_documents_text", "relevant"]

log = logging.getLogger("percache")


AUTO_RELEVANCE = 0.25
"""The calibrated relevance threshold of the default embedder (benchmarks/relevance_calibration.py)."""


def no_documents_text(scope: str | None) -> str:
    where = "your documents" if scope is None else f"the documents of scope {scope!r}"
    return (f"I found no relevant documents for this question in {where}, so I cannot answer it "
            "from them.")


def best_relevance(a: Assistant, query: Query, chunks: list[Chunk]) -> tuple[float | None, int]:
    """Cosine similarity of the question and its most similar retrieved chunk, and how many
    chunks had no stored vector.

    Vectors come from hook ``percache_chunk_vectors`` (the default: the knowledge bank's).
    Chunks no plugin has a vector for (a third-party retriever's own chunks) are embedded now
    with the banks' embedder, the one ``query`` is embedded with; the count says how many."""
    if not chunks:
        return None, 0
    stored = a.hooks.chunk_vectors(a.ctx, chunks)
    missing = [c for c in chunks if c.id not in stored]
    fresh = iter(a.embedder.embed([c.text for c in missing]) if missing else ())
    vectors = np.stack([stored[c.id] if c.id in stored else next(fresh) for c in chunks])
    if missing and a.config.debug_log:
        log.info("percache relevance: %d retrieved chunk(s) had no stored vector; embedded now",
                 len(missing))
    return float((vectors @ query.embedding).max()), len(missing)


def relevant(a: Assistant, chunks: list[Chunk], relevance: float | None) -> bool:
    """Whether the retrieval found something to answer from (``Config.relevance_threshold``)."""
    threshold = a.config.relevance_threshold
    if threshold is None:
        return True
    if not chunks:
        return False
    if threshold == "auto":
        if a.embedder.name != DEFAULT_MODEL_NAME:
            return True
        threshold = AUTO_RELEVANCE
    return relevance is not None and relevance >= float(threshold)
