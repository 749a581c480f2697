"""A session's K/V slices on disk: one safetensors file per saved run of cache positions
(written to a temp file, fsynced and renamed), checked when read back.

A missing or corrupt slice (checksum, shape, metadata) or a gap makes the whole snapshot a
miss: the caller falls back to re-prefilling from the stored ids, never a wrong cache.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..kv.integrity import CorruptNodeError, checksum_tensors, read_node_file, write_node_file
from ..kv.store_index import layout_of

__all__ = ["write_slice", "read_slices", "layout_bytes", "slice_prefix"]

_DTYPE_BYTES = {"torch.float32": 4, "torch.float16": 2, "torch.bfloat16": 2, "torch.float64": 8}


def slice_prefix(name: str) -> str:
    """The start of the file names of session ``name``'s slices (a hash: names may hold any text)."""
    return hashlib.blake2b(name.encode(), digest_size=8).hexdigest()


def write_slice(directory: Path, name: str, fingerprint: str, cache: Any, start: int,
                stop: int) -> tuple[Path, str, str]:
    """Write positions ``start:stop`` of ``cache``; returns the file, its checksum and layout (JSON)."""
    tensors = {}
    for i, lay in enumerate(cache.layers):
        tensors[f"k.{i}"] = lay.keys[0, :, start:stop].contiguous()
        tensors[f"v.{i}"] = lay.values[0, :, start:stop].contiguous()
    path = directory / f"{slice_prefix(name)}-{start}-{stop}.safetensors"
    write_node_file(path, tensors, {"fingerprint": fingerprint, "session": name})
    layout = json.dumps([(k, str(t.dtype), list(t.shape)) for k, t in tensors.items()])
    return path, checksum_tensors(tensors.values()), layout


def layout_bytes(text: str) -> int:
    """The bytes a slice of this layout holds (0 when the layout is unreadable)."""
    return sum(_DTYPE_BYTES.get(dtype, 4) * math.prod(shape) for _, dtype, shape in layout_of(text) or [])


def read_slices(directory: Path, fingerprint: str, slices: Sequence[Any],
                n_ids: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Each layer's keys and values of ``slices`` (``chat_kv`` rows ``start, stop, file,
    checksum, layout`` in order) joined; None when one is missing, corrupt or out of order, or
    they hold more positions than the session's ``n_ids``."""
    pos, parts = 0, []
    for start, stop, file, checksum, layout in slices:
        if start != pos:
            return None
        specs = layout_of(layout)
        if specs is None or any(len(s) < 2 or s[1] != stop - start for _, _, s in specs):
            return None
        try:
            parts.append(read_node_file(directory / file, expected_metadata={"fingerprint": fingerprint},
                                        layout=specs, checksum=checksum))
        except (CorruptNodeError, OSError, ValueError):
            return None
        pos = stop
    if not parts or pos > n_ids:
        return None
    n_layers = len(parts[0]) // 2
    return [(torch.cat([p[f"k.{i}"] for p in parts], dim=1), torch.cat([p[f"v.{i}"] for p in parts], dim=1))
            for i in range(n_layers)]
