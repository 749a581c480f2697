"""The prediction layer's traces of removed chunks: queued tasks naming them and the abstracts
summarizing them (used by the handle's removals and by ``percache store remove --doc``)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ..idle import IdleQueue
from .state import REBUILD_ABSTRACT, PredictionState, task_chunk

__all__ = ["forget_predictions", "forget_stored_predictions"]


def forget_predictions(state: PredictionState, queue: IdleQueue, ids: Collection[str], *,
                       rebuild: bool) -> list[str | None]:
    """Drop the queued tasks that name these chunks (knowledge predictions, K/V warming) and the
    abstracts built from them, at once; with ``rebuild``, an ``abstract`` task builds each again
    in idle time from the chunks its scope holds then. Returns the scopes whose abstract was
    dropped."""
    if not ids:
        return []
    queue.drop("predict_knowledge", lambda q: (task_chunk(q) or ("",))[0] not in ids)
    queue.drop("warm", lambda q: q not in ids)  # a warm task's question is its chunk id
    scopes = state.forget_chunks(ids)
    if rebuild:
        for scope in scopes:
            queue.push("abstract", REBUILD_ABSTRACT, scope)
    return scopes


def forget_stored_predictions(db_path: Path, ids: Collection[str]) -> list[str | None]:
    """:func:`forget_predictions` on the state and queue in the store database ``db_path``,
    with no handle open (``percache store remove --doc``); the abstracts are built again by
    the next handle's idle work."""
    state, queue = PredictionState(db_path), IdleQueue(db_path)
    try:
        return forget_predictions(state, queue, ids, rebuild=True)
    finally:
        state.close()
        queue.close()
