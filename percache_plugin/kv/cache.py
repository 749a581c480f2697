"""Moving K/V between stored chunks and a transformers cache."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import Cache, DynamicCache

from .store import ChunkKV

__all__ = ["cache_from_chunks", "slice_chunk", "empty_cache", "layer_kv"]


def empty_cache() -> DynamicCache:
    # No config on purpose: a config-built cache keeps only the window on sliding layers,
    # and the full K/V is what must be stored.
    return DynamicCache()


def cache_from_chunks(chunks: Sequence[ChunkKV], dtype: torch.dtype, device: torch.device) -> DynamicCache:
    """A fresh cache holding the chunks' K/V back to back (batch of one).

    Always a new tensor per layer (``torch.cat``), so ``generate`` may mutate the cache freely.
    Built through the public ``Cache.update`` (one call per layer on an empty cache).
    """
    cache = empty_cache()
    for layer in range(len(chunks[0].keys)):
        k = torch.cat([c.keys[layer] for c in chunks], dim=1).to(device=device, dtype=dtype)
        v = torch.cat([c.values[layer] for c in chunks], dim=1).to(device=device, dtype=dtype)
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
