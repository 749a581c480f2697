"""Moving K/V between stored chunks and a transformers cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import DynamicLayer

from .join_buffer import JoinBuffers
from .layer_read import LayerGate
from .store import ChunkKV

__all__ = ["cache_from_chunks", "slice_chunk", "empty_cache", "layer_kv", "DeferredLayer", "wait_layers"]


def empty_cache() -> DynamicCache:
    # No config on purpose: a config-built cache keeps only the window on sliding layers,
    # and the full K/V is what must be stored.
    return DynamicCache()


class DeferredLayer(DynamicLayer):
    """A ``DynamicLayer`` built from the chunks' K/V (``[1, heads, T_i, dim]`` each) that
    concatenates them only when first needed: on its first :meth:`update`, together with the new
    states in the same ``torch.cat`` (one copy, the one the model's first forward over any built
    cache makes anyway: ``DynamicLayer.update`` concatenates), or when ``keys``/``values`` are
    read or set before that (then alone). The parts are never written to, handed out or kept
    after that: the chunks' tensors (the RAM tier's, say) stay as they were, and ``generate``
    may mutate the cache freely. Afterwards it behaves as its parent.

    ``wait``: called before the parts are first touched (the parts are still being read, e.g.
    :meth:`~percache_plugin.kv.layer_read.LayerGate.wait`; what it raises propagates, and the
    layer stays deferred); the parts are then converted to ``dtype`` and ``device`` (default:
    the first key part's).

    ``buffers``: the join writes into memory lent by it (:class:`~.join_buffer.JoinBuffers`,
    slots ``(slot, "k")`` and ``(slot, "v")``), pages already mapped when it is reused, instead
    of a fresh allocation; the result is the same. A join whose new states require grad (a
    forward with autograd on) allocates instead: ``torch.cat(out=...)`` is not differentiable."""

    def __init__(self, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], *,
                 wait: Callable[[], None] | None = None, dtype: torch.dtype | None = None,
                 device: torch.device | None = None, buffers: JoinBuffers | None = None,
                 slot: int = 0) -> None:
        self._parts: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        super().__init__()
        if not keys or len(keys) != len(values):
            raise ValueError("a deferred layer needs as many key as value parts, at least one")
        self._parts = (list(keys), list(values))
        self._wait = wait
        self._buffers, self._slot = buffers, slot
        self._length = sum(int(k.shape[-2]) for k in keys)
        self.dtype = keys[0].dtype if dtype is None else dtype
        self.device = keys[0].device if device is None else device
        self.is_initialized = True

    def wait(self) -> None:
        """Wait until the parts are read and checked (``wait``, once), without joining them."""
        if self._wait is not None:
            self._wait()
            self._wait = None

    @property
    def deferred(self) -> bool:
        """Whether the parts are not concatenated yet."""
        return self._parts is not None

    def _join(self, extra: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        assert self._parts is not None
        self.wait()
        pk, pv = ([t.to(device=self.device, dtype=self.dtype) for t in ts] for ts in self._parts)
        self._parts = None
        self._keys = self._cat(pk if extra is None else [*pk, extra[0]], "k")
        self._values = self._cat(pv if extra is None else [*pv, extra[1]], "v")

    def _cat(self, parts: list[torch.Tensor], kind: str) -> torch.Tensor:
        if self._buffers is None or any(p.dtype != self.dtype or p.device != self.device for p in parts) \
                or (torch.is_grad_enabled() and any(p.requires_grad for p in parts)):
            return torch.cat(parts, dim=-2)  # cat(out=...) refuses inputs that require grad
        shape = (*parts[0].shape[:-2], sum(int(p.shape[-2]) for p in parts), parts[0].shape[-1])
        out = self._buffers.take((self._slot, kind), shape, self.dtype, self.device)
        return torch.cat(parts, dim=-2, out=out)

    @property  # type: ignore[override]
    def keys(self) -> torch.Tensor | None:
        if self._parts is not None:
            self._join()
        return self._keys

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        if self._parts is not None:
            self._join()
        self._keys = value

    @property  # type: ignore[override]
    def values(self) -> torch.Tensor | None:
        if self._parts is not None:
            self._join()
        return self._values

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        if self._parts is not None:
            self._join()
        self._values = value

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self._parts is None:
            return super().update(key_states, value_states, *args, **kwargs)
        self._join((key_states, value_states))
        return self._keys, self._values  # type: ignore[return-value]

    def get_seq_length(self) -> int:
        return self._length if self._parts is not None else super().get_seq_length()


def cache_from_chunks(chunks: Sequence[ChunkKV], dtype: torch.dtype, device: torch.device, *,
                      buffers: JoinBuffers | None = None) -> DynamicCache:
    """A fresh cache holding the chunks' K/V back to back (batch of one), in
    :class:`DeferredLayer` s: nothing is copied here; each layer's chunks are concatenated by the
    first forward, with its new tokens, in the one copy that forward makes anyway (chunks in
    another dtype or device are converted then, a copy of their own), into memory lent by
    ``buffers`` when given. Chunks still being read (``ChunkKV.pending``) are waited for layer
    by layer, when the forward first uses a layer."""
    cache = empty_cache()
    gates = [c.pending for c in chunks if c.pending is not None]
    for layer in range(len(chunks[0].keys)):
        keys = [c.keys[layer].unsqueeze(0) for c in chunks]
        values = [c.values[layer].unsqueeze(0) for c in chunks]
        wait = _waiter(gates, layer) if gates else None
        cache.layers.append(DeferredLayer(keys, values, wait=wait, dtype=dtype, device=device,
                                          buffers=buffers, slot=layer))
    return cache


def _waiter(gates: Sequence[LayerGate], layer: int) -> Callable[[], None]:
    def wait() -> None:
        for gate in gates:
            gate.wait(layer)
    return wait


def wait_layers(cache: Any) -> None:
    """Wait until every :class:`DeferredLayer` of ``cache`` still being read is read and checked
    (a no-op after a forward, which waited for each layer).

    :raises ~percache_plugin.kv.layer_read.CorruptLayerError: a layer failed its check."""
    for layer in getattr(cache, "layers", ()):
        if isinstance(layer, DeferredLayer):
            layer.wait()


def layer_kv(cache: Cache, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values ``[batch, kv_heads, T, head_dim]`` of layer ``index`` of a dynamic
    cache (``DynamicLayer.keys``/``values``, public attributes)."""
    layer = cache.layers[index]
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
        raise ValueError(f"cache layer {index} ({type(layer).__name__}) holds no keys and values")
    return keys, values


def slice_chunk(cache: Cache, start: int, end: int) -> ChunkKV:
    """Copy positions ``[start, end)`` of every layer (batch row 0) out of a cache."""
    keys, values = [], []
    for i in range(len(cache.layers)):
        k, v = layer_kv(cache, i)
        if k.shape[-2] < end:
            raise ValueError(
                f"cache layer holds {k.shape[-2]} positions, need {end}: "
                "was it built with a sliding-window config?"
            )
        keys.append(k[0, :, start:end].contiguous().clone())
        values.append(v[0, :, start:end].contiguous().clone())
    return ChunkKV(tuple(keys), tuple(values))
