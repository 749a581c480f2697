"""Checksums of node tensors: one CRC-32 over every tensor (``crc32:``, the first format) or one
per layer (``crc32l:``, written since the layer-by-layer reader, :mod:`.layer_read`).

A node's checksum string says its scheme, so both read: ``crc32:XXXXXXXX`` is the CRC-32 of the
raw bytes of every tensor in layout order (``k.0`` .. ``k.{L-1}``, ``v.0`` .. ``v.{L-1}``), checked
only once the whole file is read; ``crc32l:AAAAAAAA,BBBBBBBB,...`` holds one CRC-32 per layer, of
``k.i``'s bytes then ``v.i``'s, so layer ``i`` can be checked (and used) as soon as it is read,
while later layers are still on their way. Both detect what CRC-32 detects (every single-bit
flip, every burst up to 32 bits) in each checked span.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

try:  # ISA-L's crc32: the same values as zlib's, several times faster (optional)
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - depends on the environment
    from zlib import crc32 as _crc32

__all__ = ["LAYERED_PREFIX", "WHOLE_PREFIX", "checksum_tensors", "crc_update", "layer_checksums",
           "node_checksum", "parse_layer_checksums"]

WHOLE_PREFIX = "crc32:"
LAYERED_PREFIX = "crc32l:"


def crc_update(crc: int, t: torch.Tensor) -> int:
    """``crc`` continued over the raw bytes of a contiguous CPU tensor."""
    return _crc32(t.reshape(-1).view(torch.uint8).numpy().data, crc) if t.numel() else crc


def checksum_tensors(tensors: Iterable[torch.Tensor]) -> str:
    """CRC32 over the raw bytes of contiguous CPU tensors, in the given order (``crc32:``)."""
    crc = 0
    for t in tensors:
        crc = crc_update(crc, t)
    return f"{WHOLE_PREFIX}{crc:08x}"


def layer_checksums(keys: Iterable[torch.Tensor], values: Iterable[torch.Tensor]) -> str:
    """One CRC-32 per layer, over the layer's key bytes then its value bytes (``crc32l:``)."""
    crcs = [crc_update(crc_update(0, k), v) for k, v in zip(keys, values, strict=True)]
    return LAYERED_PREFIX + ",".join(f"{c:08x}" for c in crcs)


def parse_layer_checksums(checksum: str, n_layers: int) -> list[int] | None:
    """The per-layer CRCs of a ``crc32l:`` checksum, or None for any other scheme.

    :raises ValueError: a ``crc32l:`` string that does not hold ``n_layers`` 8-digit hex CRCs."""
    if not checksum.startswith(LAYERED_PREFIX):
        return None
    parts = checksum[len(LAYERED_PREFIX):].split(",")
    if len(parts) != n_layers or not all(len(p) == 8 for p in parts):
        raise ValueError(f"per-layer checksum holds {len(parts)} values for {n_layers} layers")
    return [int(p, 16) for p in parts]


def node_checksum(tensors: Mapping[str, torch.Tensor], names: Iterable[str], like: str) -> str:
    """The checksum of a node's ``tensors`` in the scheme of ``like`` (the recorded checksum):
    per layer for ``crc32l:``, else over every tensor in the order of ``names``."""
    if like.startswith(LAYERED_PREFIX):
        n = sum(1 for name in tensors if name.startswith("k."))
        return layer_checksums((tensors[f"k.{i}"] for i in range(n)), (tensors[f"v.{i}"] for i in range(n)))
    return checksum_tensors(tensors[name] for name in names)
