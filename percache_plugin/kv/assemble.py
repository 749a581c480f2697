"""Assemble a full-length splice cache from exact and shifted chunks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..attention.rope import RopeShifter
from ..attention.splice import SpliceCache
from .store import ChunkKV

__all__ = ["Placed", "assemble"]


@dataclass(frozen=True)
class Placed:
    """A loaded chunk and where it goes: ``start`` in the prompt, computed at ``source_start``."""

    kv: ChunkKV
    start: int
    source_start: int


def assemble(
    placed: Sequence[Placed],
    length: int,
    shifter: RopeShifter | None,
    *,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[SpliceCache, torch.Tensor]:
    """A SpliceCache of ``length`` positions holding every placed chunk (keys rotated by
    ``start - source_start``), and a bool mask of the positions they fill. Chunks are cut at
    ``length`` (the last prompt token is always computed by ``generate``)."""
    ref = placed[0].kv
    keys, values = [], []
    for layer in range(len(ref.keys)):
        kh, _, kd = ref.keys[layer].shape
        vh, _, vd = ref.values[layer].shape
        keys.append(torch.zeros(1, kh, length, kd, dtype=dtype, device=device))
        values.append(torch.zeros(1, vh, length, vd, dtype=dtype, device=device))
    filled = torch.zeros(length, dtype=torch.bool)
    for p in placed:
        n = min(p.kv.n_tokens, length - p.start)
        if n <= 0:
            continue
        delta = p.start - p.source_start
        if delta != 0 and shifter is None:
            raise ValueError("a chunk placed at a new position needs a RoPE shifter")
        for layer in range(len(keys)):
            k, v = p.kv.keys[layer][:, :n], p.kv.values[layer][:, :n]
            if delta != 0:
                k, v = shifter.shift_kv(k, v, layer, delta)  # type: ignore[union-attr]
            keys[layer][0, :, p.start:p.start + n] = k.to(dtype)
            values[layer][0, :, p.start:p.start + n] = v.to(dtype)
        filled[p.start:p.start + n] = True
    return SpliceCache(keys, values), filled
