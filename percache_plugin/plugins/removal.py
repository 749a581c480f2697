"""What goes with chunks that leave the knowledge bank (a document removed, or given again with
other text): the stored answers built on them, their K/V under every model fingerprint, and the
prediction layer's traces of them (idle tasks naming them, the abstracts summarizing them)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from ..kv.chunk_nodes import delete_chunk_kv
from ..predict.forget import forget_predictions as forget_state

if TYPE_CHECKING:
    from ..hooks.contexts import AssistantContext

__all__ = ["forget_chunks", "forget_predictions"]


def forget_chunks(ctx: AssistantContext, ids: Collection[str]) -> None:
    """Before chunks are removed: the answers built on them (hook ``percache_sources_forgotten``;
    a failure raises before anything else goes), their K/V in every fingerprint's store, and
    their predictions (:func:`forget_predictions`)."""
    if ids:
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
