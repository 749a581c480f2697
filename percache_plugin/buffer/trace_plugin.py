"""``Config.kv_trace``: record the K/V store's node reads and writes as a block-level trace.

A built-in plugin wrapping ``percache_load_chunk`` and ``percache_store_chunk``: every node a
request loads (whether the RAM tier or the store served it) is a read, every node stored a
write, one row each (``kv/<key>``, offset 0, the node's size as the store records it: its
file's bytes; docs/TRACES.md). Root
nodes (the system/persona prefix) are declared ``hot``, as the RAM tier declares them; other
rows carry no class, so a policy replaying the trace classifies them itself. The file is opened
on the first row (rows are appended to an existing trace: several handles, one after another,
may record one trace) and closed with the handle; with ``kv_trace`` None nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Generator

from ..hooks.contexts import AssistantContext, EngineContext
from ..hooks.specs import hookimpl
from ..kv.chunk import ChunkKV
from ..segments import PromptPiece
from .trace import Tracer

__all__ = ["KVTraceRecorder"]


class KVTraceRecorder:
    """Appends a trace row for every node read or written while ``Config.kv_trace`` is set."""

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self._path: str | None = None

    def _tracer(self, ctx: EngineContext) -> Tracer | None:
        path = ctx.config.kv_trace
        if path != self._path:  # switched on, off or to another file
            self.close()
            self.tracer, self._path = (Tracer(path, append=True) if path else None), path
        return self.tracer

    def _record(self, ctx: EngineContext, op: str, key: str, nbytes: int, parent: str | None) -> None:
        tracer = self._tracer(ctx)
        if tracer is not None:
            tracer.record(op, f"kv/{key}", 0, nbytes, "hot" if parent is None else "")

    @hookimpl(wrapper=True)
    def percache_load_chunk(self, ctx: EngineContext, key: str, token_ids: tuple[int, ...],
                            layered: bool) -> Generator[None, ChunkKV | None, ChunkKV | None]:
        kv = yield  # only the node's size is read: a chunk still being read (layered) is fine
        if kv is not None and ctx.config.kv_trace:
            info = ctx.store.info(key)
            if info is not None:
                self._record(ctx, "r", key, info.nbytes, info.parent)
        return kv

    @hookimpl(wrapper=True)
    def percache_store_chunk(self, ctx: EngineContext, key: str, piece: PromptPiece, parent: str | None,
                             kv: ChunkKV, exact: bool) -> Generator[None, bool | None, bool | None]:
        handled = yield
        if handled and ctx.config.kv_trace:
            info = ctx.store.info(key)
            if info is not None:
                self._record(ctx, "w", key, info.nbytes, parent)
        return handled

    @hookimpl
    def percache_close(self, ctx: AssistantContext) -> None:
        """Close the trace file."""
        self.close()

    def close(self) -> None:
        if self.tracer is not None:
            self.tracer.close()
        self.tracer = None
        self._path = None
