"""Read a node file's tensors with one ``preadv`` into one buffer.

A node file is a plain safetensors file: an 8-byte little-endian header length, a JSON header
(``__metadata__`` and, per tensor, ``dtype``, ``shape`` and ``data_offsets`` into the data that
follows), then the tensor bytes. :func:`read_tensors` reads the header, then the whole data
section with ``os.preadv`` straight into one freshly allocated tensor (the read releases the
GIL and asks the disk for the whole file at once), and returns views into it: no memory map,
no page faults one page at a time, no second copy.

Measured on the 9 node files of the ``bench ttft`` store (88 MiB of fp32 K/V, dropped from the
page cache; standalone, interleaved, 9 repeats, load 4-8; CRC-32 included in both): median
74-84 ms against 144-166 ms for ``safetensors.safe_open`` + ``get_tensor`` (a memory map copied
into new tensors); warm 21-24 against 35-43 ms. Inside a request, after the store's
``posix_fadvise(WILLNEED)`` prefetch of every planned file, the cold reads measured about the
same with either reader (``benchmarks/cold_load.py``); without that prefetch, and other I/O on
the machine, the reads one after the other fell to ~200 MB/s. Requests now read their exact
prefix layer by layer while the forward runs (:mod:`.layer_read`, ``Config.kv_overlap_reads``),
and the prefetch is a switch (``Config.kv_prefetch``), off by default.

Nothing here trusts the file: a header that cannot be parsed, offsets outside the data, a size
that does not match the dtype and shape, or a short read raise ValueError with the reason (the
caller turns it into :class:`~percache_plugin.kv.integrity.CorruptNodeError`). The checks of
what the store recorded (metadata, names, dtypes, shapes, checksum) are the caller's.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["DIRECT_DTYPES", "MAX_HEADER", "RawNode", "direct_read_supported", "header_of", "read_raw",
           "read_tensors", "tensors_of"]

# torch dtype name (as in a layout: ``str(torch.float32)``) -> safetensors dtype code
DIRECT_DTYPES: dict[str, str] = {
    "torch.float64": "F64", "torch.float32": "F32", "torch.float16": "F16",
    "torch.bfloat16": "BF16", "torch.int64": "I64", "torch.int32": "I32", "torch.int16": "I16",
    "torch.int8": "I8", "torch.uint8": "U8", "torch.bool": "BOOL",
}
_TORCH = {name: getattr(torch, name.removeprefix("torch.")) for name in DIRECT_DTYPES}

MAX_HEADER = 100 * 2**20  # safetensors' own bound on the JSON header


def direct_read_supported(dtypes: Sequence[str]) -> bool:
    """Whether :func:`read_tensors` can read tensors of these dtypes here (a little-endian
    host: safetensors stores little-endian bytes, and the views are not byte-swapped)."""
    return sys.byteorder == "little" and all(d in DIRECT_DTYPES for d in dtypes)


def _read_exact(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            raise ValueError(f"file is truncated ({offset + done} bytes, expected "
                             f"{offset + len(view)})")
        done += n


def _header(fd: int, size: int) -> tuple[dict[str, object], int]:
    """The parsed JSON header and where the data section starts."""
    if size < 8:
        raise ValueError(f"file is truncated ({size} bytes)")
    (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    if n > min(MAX_HEADER, size - 8):
        raise ValueError(f"header length {n} exceeds the file ({size} bytes)")
    raw = os.pread(fd, n, 8)
    if len(raw) != n:
        raise ValueError("file is truncated inside its header")
    header = json.loads(raw)
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    return header, 8 + n


def header_of(fd: int) -> tuple[dict[str, object], int]:
    """The parsed JSON header of an open node file and where its data section starts.

    :raises ValueError: the header cannot be parsed or the file is shorter than it says."""
    return _header(fd, os.fstat(fd).st_size)


def _view(data: torch.Tensor, name: str, entry: object, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(entry, dict):
        raise ValueError(f"tensor {name} has no header entry")
    if entry.get("dtype") != DIRECT_DTYPES[dtype] or list(entry.get("shape", ())) != list(shape):
        raise ValueError(f"tensor {name} is {entry.get('dtype')} {entry.get('shape')}, expected "
                         f"{DIRECT_DTYPES[dtype]} {list(shape)}")
    offsets = entry.get("data_offsets")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(type(o) is int for o in offsets)):
        raise ValueError(f"tensor {name} has malformed data_offsets {offsets!r}")
    begin, end = offsets
    torch_dtype = _TORCH[dtype]
    numel = 1
    for d in shape:
        numel *= d
    want = numel * torch_dtype.itemsize
    if not 0 <= begin <= end <= data.numel() or end - begin != want:
        raise ValueError(f"tensor {name} spans bytes [{begin}, {end}) of {data.numel()}, "
                         f"expected {want} bytes")
    if begin % torch_dtype.itemsize:
        raise ValueError(f"tensor {name} starts at a misaligned offset {begin}")
    return data[begin:end].view(torch_dtype).reshape(shape)


@dataclass(frozen=True)
class RawNode:
    """A node file as read: its parsed JSON header and its data section (one uint8 tensor).
    Nothing in it is checked yet beyond the header's length and JSON syntax."""

    header: dict[str, object]
    data: torch.Tensor


def read_raw(path: Path) -> RawNode:
    """Read the header and the whole data section of a node file (one ``preadv``).

    :raises FileNotFoundError: the file is missing.
    :raises ValueError: the header cannot be parsed or the file is shorter than it says."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        header, start = _header(fd, size)
        data = torch.empty(size - start, dtype=torch.uint8)
        if data.numel():
            _read_exact(fd, data.numpy().data, start)
    finally:
        os.close(fd)
    return RawNode(header, data)


def tensors_of(raw: RawNode, layout: Sequence[tuple[str, str, tuple[int, ...]]]
               ) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """The ``__metadata__`` of a node read by :func:`read_raw` and the tensors named in
    ``layout`` (views into its data), each checked against its dtype and shape in ``layout`` and
    against the bounds of the data. The file must name exactly the layout's tensors.

    :raises ValueError: anything malformed, with the reason."""
    header = dict(raw.header)
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("header metadata is not a map of strings")
    if set(header) != {name for name, _, _ in layout}:
        raise ValueError(f"tensor names differ from the recorded layout: {sorted(header)}")
    tensors = {name: _view(raw.data, name, header[name], dtype, shape) for name, dtype, shape in layout}
    return metadata, tensors


def read_tensors(path: Path, layout: Sequence[tuple[str, str, tuple[int, ...]]]
                 ) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """:func:`read_raw` then :func:`tensors_of`."""
    return tensors_of(read_raw(path), layout)
