"""What goes with chunks that leave the knowledge bank (a document removed, or given again with
other text): the stored answers built on them, their K/V under every model fingerprint, and the
prediction layer's traces of them (idle tasks naming them, the abstracts summarizing them).
Each forget is journaled (:mod:`..forget_journal`): one that fails part way is run again."""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from ..kv.chunk_nodes import delete_chunk_kv
from ..predict.forget import forget_predictions as forget_state

if TYPE_CHECKING:
    from ..hooks.contexts import AssistantContext

__all__ = ["forget_chunks", "forget_predictions", "journaled"]


def journaled(ctx: AssistantContext, kind: str, ids: Collection[str], *,
              keep: bool = False) -> AbstractContextManager[object]:
    """The handle's journal around a forget of ``ids`` (``ForgetJournal.forgetting``); nothing
    without one."""
    journal = ctx.forget_journal
    return contextlib.nullcontext() if journal is None else journal.forgetting(kind, ids, keep=keep)


def forget_chunks(ctx: AssistantContext, ids: Collection[str], *, keep: bool = False) -> None:
    """The answers built on chunks (hook ``percache_sources_forgotten``; a failure raises before
    anything else goes), their K/V in every fingerprint's store, and their predictions
    (:func:`forget_predictions`), journaled: a failure or a crash part way is completed later.
    ``keep``: run before the chunks are removed; the journal keeps them until the pass after."""
    if ids:
        with journaled(ctx, "chunk", ids, keep=keep):
            ctx.hooks.sources_forgotten(ctx, sorted(ids))
            delete_chunk_kv(ctx.engine.every_store(), ids)
            forget_predictions(ctx, ids)


def forget_predictions(ctx: AssistantContext, ids: Collection[str]) -> list[str | None]:
    """:func:`~..predict.forget.forget_predictions` on the assistant's state and idle queue;
    abstracts are built again when ``Config.predict`` predicts from knowledge."""
    state = ctx.prediction_state
    if state is None:
        return []
    return forget_state(state, ctx.idle_queue, ids, rebuild=ctx.config.predict in ("knowledge", "both"))
