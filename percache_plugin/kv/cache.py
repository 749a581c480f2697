"""Moving K/V between stored chunks and a transformers cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import DynamicLayer

from .store import ChunkKV

__all__ = ["cache_from_chunks", "slice_chunk", "empty_cache", "layer_kv", "AdoptingLayer"]


def empty_cache() -> DynamicCache:
    # No config on purpose: a config-built cache keeps only the window on sliding layers,
    # and the full K/V is what must be stored.
    return DynamicCache()


class AdoptingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose first update keeps the tensors it is given as its storage
    instead of concatenating them onto an empty tensor (a second copy of the whole layer).
    Only for tensors made for this cache: nothing else may hold them. Afterwards (and after
    ``reset``) it behaves as its parent: later updates concatenate into new tensors."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self.is_initialized:
            return super().update(key_states, value_states, *args, **kwargs)
        self.lazy_initialization(key_states, value_states)
        self.keys, self.values = key_states, value_states
        return key_states, value_states


def cache_from_chunks(chunks: Sequence[ChunkKV], dtype: torch.dtype, device: torch.device) -> DynamicCache:
    """A fresh cache holding the chunks' K/V back to back (batch of one).

    One copy per layer: ``torch.cat`` of the chunks (of one chunk too) makes a new tensor, which
    an :class:`AdoptingLayer` keeps as it is, so ``generate`` may mutate the cache freely and
    never touches the chunks' tensors (the RAM tier's, say). Filled through the public
    ``Cache.update`` (one call per layer).
    """
    cache = empty_cache()
    for layer in range(len(chunks[0].keys)):
        k = torch.cat([c.keys[layer] for c in chunks], dim=1).to(device=device, dtype=dtype)
        v = torch.cat([c.values[layer] for c in chunks], dim=1).to(device=device, dtype=dtype)
        cache.layers.append(AdoptingLayer())
        cache.update(k.unsqueeze(0), v.unsqueeze(0), layer)
    return cache


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
