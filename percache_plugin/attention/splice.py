"""SpliceCache: a cache that holds injected K/V for positions [0, L) and writes freshly computed
K/V at arbitrary (non-contiguous) positions.

Built from transformers' public cache seams: a :class:`SpliceLayer` is a ``DynamicLayer`` whose
``update`` writes at announced positions, and :class:`SpliceCache` is a ``Cache`` made of such
layers. transformers 5 calls ``Cache.update(k, v, layer_idx)`` without positions, so the
positions of a forward are announced beforehand with ``with cache.splice(positions):``. The
default causal mask assumes contiguous queries after the cached part, so during a splice the
attention hook replaces it with :func:`splice_mask`, built from the true positions (and the
layer's sliding window, or its attention chunk on chunked-attention layers: Llama 4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from transformers import Cache, DynamicLayer

__all__ = ["SpliceCache", "SpliceLayer", "splice_mask", "attention_chunk_of", "ProbeDone"]


class ProbeDone(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by a probing splice once the probed layer's fresh K/V is captured."""


class _SpliceState:
    """What a forward through the cache announced: its positions, and a layer to probe."""

    def __init__(self) -> None:
        self.positions: torch.Tensor | None = None
        self.probe_layer: int | None = None
        self.probed: tuple[torch.Tensor, torch.Tensor] | None = None


class SpliceLayer(DynamicLayer):
    """A ``DynamicLayer`` that, during a splice, writes the new K/V at the announced positions
    (in place) and returns the whole layer; outside a splice it appends like its parent."""

    def __init__(self, state: _SpliceState, index: int) -> None:
        super().__init__()
        self._state = state
        self._index = index

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        pos = self._state.positions
        if pos is None:
            return super().update(key_states, value_states, *args, **kwargs)
        if key_states.shape[-2] != pos.numel():
            raise RuntimeError(
                f"splice announced {pos.numel()} positions, layer {self._index} got {key_states.shape[-2]}")
        if self._state.probe_layer == self._index:
            self._state.probed = (key_states.detach().clone(), value_states.detach().clone())
            raise ProbeDone
        keys, values = self.keys, self.values
        if keys is None or values is None:
            raise RuntimeError(f"splice layer {self._index} was never filled")
        pos = pos.to(keys.device)
        keys.index_copy_(-2, pos, key_states.to(keys.dtype))
        values.index_copy_(-2, pos, value_states.to(values.dtype))
        return keys, values


class SpliceCache(Cache):
    """A full-length cache (batch of one) whose slots can be overwritten at given positions.

    :param keys: per layer ``[1, kv_heads, L, head_dim]``; slots not yet computed may hold anything.
    :param values: like ``keys``.
    """

    def __init__(self, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
        self._state = _SpliceState()
        layers = [SpliceLayer(self._state, i) for i in range(len(keys))]
        all_layers: list[Any] = list(layers)  # Cache's list type is invariant
        super().__init__(layers=all_layers)
        for layer, k, v in zip(layers, keys, values, strict=True):
            layer.update(k, v)  # the first update of an empty layer holds exactly (k, v)

    @property
    def splicing(self) -> bool:
        return self._state.positions is not None

    @property
    def positions(self) -> torch.Tensor | None:
        return self._state.positions

    @property
    def probed(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The fresh K/V of the probed layer, after a probing splice."""
        return self._state.probed

    @contextlib.contextmanager
    def splice(self, positions: torch.Tensor, *, probe_layer: int | None = None) -> Iterator[SpliceCache]:
        """Within the block, ``update`` writes the forward's K/V at ``positions`` (sorted, unique,
        all ``< L``) and returns the whole ``[0, L)``. With ``probe_layer``, the fresh K/V of that
        layer is kept in :attr:`probed` instead of being written and :class:`ProbeDone` is raised
        (layers before it are written; the caller restores them if it must)."""
        length = self.get_seq_length()
        pos = positions.reshape(-1).to(torch.long)
        if pos.numel() == 0:
            raise ValueError("a splice needs at least one position")
        if bool((pos[1:] <= pos[:-1]).any()) or int(pos[0]) < 0 or int(pos[-1]) >= length:
            raise ValueError(f"splice positions must be sorted, unique and within [0, {length})")
        state = self._state
        state.positions, state.probe_layer, state.probed = pos, probe_layer, None
        try:
            yield self
        finally:
            state.positions, state.probe_layer = None, None


def splice_mask(
    q_positions: torch.Tensor,
    kv_length: int,
    *,
    dtype: torch.dtype,
    sliding_window: int | None = None,
    attention_chunk: int | None = None,
) -> torch.Tensor:
    """Additive mask ``[1, 1, q, kv_length]``: 0 where query position ``p`` may see key ``k``
    (``k <= p``; with a window, ``p - k < sliding_window``; with an attention chunk, ``p`` and
    ``k`` in the same chunk of ``attention_chunk`` positions), the dtype's minimum elsewhere.
    Additive floats work for both sdpa and the families' eager attention."""
    q = q_positions.reshape(-1, 1).to(torch.long)
    k = torch.arange(kv_length, device=q.device).reshape(1, -1)
    allowed = k <= q
    if sliding_window is not None:
        allowed &= (q - k) < sliding_window
    if attention_chunk is not None:
        allowed &= (q // attention_chunk) == (k // attention_chunk)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=q.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def attention_chunk_of(config: Any, layer_idx: int | None) -> int | None:
    """The attention chunk of layer ``layer_idx`` when its type is ``chunked_attention`` (Llama 4:
    a query sees only keys in its own chunk of ``attention_chunk_size`` positions, a mask the
    model builds itself and passes no keyword for), else None."""
    types = getattr(config, "layer_types", None)
    if layer_idx is None or not isinstance(types, (list, tuple)) or not 0 <= layer_idx < len(types):
        return None
    size = getattr(config, "attention_chunk_size", None)
    return size if types[layer_idx] == "chunked_attention" and isinstance(size, int) else None
