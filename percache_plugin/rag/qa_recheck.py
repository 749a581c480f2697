"""Which stored answers a change to the documents moved: the QA bank's re-check
(:meth:`~percache_plugin.rag.qa_writes.QABankBase.mark_stale_for`), its retrievals asked for all
at once so that a retriever can run them in one pass (``percache_retrieve_batch``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["Recheck", "RetrieveMany", "moved", "one_by_one"]

# (question, scope, the question's stored vector or None when unreadable)
Recheck = tuple[str, str | None, np.ndarray | None]
# the chunk ids each question retrieves now, in order; None for one the change cannot affect
RetrieveMany = Callable[[Sequence[Recheck]], Sequence[Sequence[str] | None]]
FreshRow = tuple[int, str, str | None, str, object, tuple[str, ...]]


def one_by_one(retrieve: Callable[[str, str | None, np.ndarray | None], Sequence[str] | None]) -> RetrieveMany:
    """A per-question ``retrieve(question, scope, vector)`` as a :data:`RetrieveMany`."""
    return lambda items: [retrieve(q, scope, vector) for q, scope, vector in items]


def moved(fresh: Sequence[FreshRow], new: set[str], dim: int | None, retrieve_many: RetrieveMany,
          cannot_tell: Callable[[str, str | None], bool] | None) -> list[int]:
    """The ids of the ``fresh`` entries (``QARows.fresh()``) whose question now retrieves other
    chunks than its sources or one of ``new``; an entry ``cannot_tell`` names is counted in
    without retrieval. Entries keep their order (id)."""
    told: list[int] = []
    asked: list[tuple[int, tuple[str, ...]]] = []
    items: list[Recheck] = []
    for entry_id, question, scope, model, blob, sources in fresh:
        if cannot_tell is not None and cannot_tell(model, scope):
            told.append(entry_id)
            continue
        vector = np.frombuffer(blob, dtype=np.float32) if isinstance(blob, bytes) else None
        items.append((question, scope, vector if vector is not None and vector.size == dim else None))
        asked.append((entry_id, sources))
    found = retrieve_many(items) if items else []
    if len(found) != len(items):
        raise ValueError(f"retrieve_many returned {len(found)} results for {len(items)} questions")
    hit = set(told)
    for (entry_id, sources), now in zip(asked, found, strict=True):
        if now is not None and (new.intersection(now) or set(now) != set(sources)):
            hit.add(entry_id)
    return [entry_id for entry_id, *_ in fresh if entry_id in hit]
