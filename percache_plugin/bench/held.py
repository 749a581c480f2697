"""Which chunk tensors a handle still holds: measured by weak references, not by counters.

:class:`HeldChunks` is a plugin wrapping ``percache_load_chunk`` and ``percache_load_head``
(persona head snapshots): every tensor a load returns
(from the store or the RAM tier) is followed by a weak reference. After a request, once the
caller lets its cache go, the tensors still alive are what percache itself keeps (the RAM
tier's entries); :meth:`HeldChunks.alive_bytes` sums their storages, each once (a node's
tensors are views of one buffer). ``benchmarks/ram_budget.py`` and the RAM tier's budget tests
compare it with ``ram_cache_bytes``.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Collection, Generator

import torch

from ..hooks.contexts import EngineContext
from ..hooks.specs import hookimpl
from ..kv.chunk import ChunkKV

__all__ = ["HeldChunks"]


class HeldChunks:
    """Weak references to every chunk tensor loaded through the handle it is registered with."""

    def __init__(self) -> None:
        self.refs: list[weakref.ref[torch.Tensor]] = []

    @hookimpl(wrapper=True)
    def percache_load_chunk(self, ctx: EngineContext, key: str, token_ids: tuple[int, ...],
                            layered: bool) -> Generator[None, ChunkKV | None, ChunkKV | None]:
        kv = yield
        if kv is not None:
            self.refs.extend(weakref.ref(t) for t in (*kv.keys, *kv.values))
        return kv

    @hookimpl(wrapper=True)
    def percache_load_head(self, ctx: EngineContext, name: str, version: tuple[object, ...],
                           load: Callable[[], ChunkKV | None]) -> Generator[None, ChunkKV | None, ChunkKV | None]:
        kv = yield  # a persona head snapshot, which the RAM tier keeps too
        if kv is not None:
            self.refs.extend(weakref.ref(t) for t in (*kv.keys, *kv.values))
        return kv

    def alive_bytes(self, besides: Collection[int] = ()) -> int:
        """Bytes of the storages of loaded tensors still alive (after a garbage collection),
        but those whose storage's ``data_ptr`` is in ``besides`` (an in-memory store's own)."""
        gc.collect()
        seen: dict[int, int] = {}
        for ref in self.refs:
            t = ref()
            if t is not None and t.untyped_storage().data_ptr() not in besides:
                st = t.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        self.refs = [r for r in self.refs if r() is not None]
        return sum(seen.values())
