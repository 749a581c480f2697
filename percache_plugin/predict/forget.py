"""The prediction layer's traces of removed chunks: queued tasks naming them and the abstracts
summarizing them (used by the handle's removals and by ``percache store remove --doc``)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path

from ..idle import IdleQueue
from ..rag.qa_types import QAEntry
from .state import REBUILD_ABSTRACT, PredictionState, task_chunk

__all__ = ["built_on", "forget_predictions", "forget_stored_predictions", "stored_predicted_from"]


def forget_predictions(state: PredictionState, queue: IdleQueue, ids: Collection[str], *,
                       rebuild: bool) -> list[str | None]:
    """Drop the queued tasks that name these chunks (knowledge predictions, K/V warming) or
    process a question predicted from one of them, and the abstracts built from them, at once; with ``rebuild``, an ``abstract`` task builds each again
    in idle time from the chunks its scope holds then. Returns the scopes whose abstract was
    dropped."""
    if not ids:
        return []
    queue.drop("predict_knowledge", lambda q, _: (task_chunk(q) or ("",))[0] not in ids)
    queue.drop("warm", lambda q, _: q not in ids)  # a warm task's question is its chunk id
    predicted = state.predicted_from(ids)  # and the questions predicted from them
    for kind in ("populate", "decode", "reprefill"):
        queue.drop(kind, lambda q, s: (s, q) not in predicted)
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


def built_on(entries: Iterable[QAEntry], ids: Collection[str],
             predicted: Collection[tuple[str | None, str]]) -> list[int]:
    """The ids of the stored answers built on chunks ``ids``: those citing one as a source, and
    those of a question predicted from one (``predicted``: ``PredictionState.predicted_from``)."""
    return [e.id for e in entries if not set(e.sources).isdisjoint(ids)
            or (e.origin == "predicted" and (e.scope, e.question) in predicted)]


def stored_predicted_from(db_path: Path, ids: Collection[str]) -> set[tuple[str | None, str]]:
    """``PredictionState.predicted_from`` in the store database ``db_path``."""
    state = PredictionState(db_path)
    try:
        return state.predicted_from(ids)
    finally:
        state.close()
