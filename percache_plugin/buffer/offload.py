"""A buffer cache for weights offloaded to disk with accelerate.

:class:`BufferedWeights` is a read-only mapping (parameter name -> tensor) over an accelerate
offload folder (``index.json`` + one ``<name>.dat`` per tensor, as written by
``accelerate.utils.offload_state_dict`` or ``dispatch_model(..., offload_dir=...)``). It is the
``weights_map`` accelerate's :class:`~accelerate.hooks.AlignDevicesHook` reads before every
module's forward; :func:`dispatch_buffered` attaches it with accelerate's public
``attach_align_device_hook_on_blocks``, exactly as ``dispatch_model`` does with its own
``OffloadedWeightsLoader``. No model code is patched.

Reads bypass the OS page cache so that the replacement policy, not the kernel, decides what is in
RAM: each file is read with plain ``os.read`` and then dropped from the page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (O_DIRECT needs aligned buffers and is refused by tmpfs
and some filesystems; dropping after the read works everywhere Linux runs). accelerate is an
optional dependency (``pip install accelerate``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from .cache import BufferCache, CacheStats
from .policies import Policy
from .trace import Tracer

__all__ = ["BufferedWeights", "dispatch_buffered", "read_dropping_pages", "read_path_bandwidth"]



def _dtype(name: str) -> torch.dtype | None:
    """The torch dtype of an index entry: accelerate writes numpy's names, which are torch's,
    and ``bfloat16``/``float8_*`` for the tensors it saved as int16/int8 bits."""
    dtype = getattr(torch, name, None)
    return dtype if isinstance(dtype, torch.dtype) and not dtype.is_complex else None


def read_dropping_pages(path: str | Path) -> bytearray:
    """The whole file, then its pages dropped from the OS page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = os.readv(fd, [view[got:]])
            if n == 0:
                raise OSError(f"{path}: file shrank while reading ({got} of {size} bytes)")
            got += n
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return buf
    finally:
        os.close(fd)


def read_path_bandwidth(paths: Iterable[str | Path]) -> float:
    """Bytes/s of reading ``paths`` the way :class:`BufferedWeights` reads a miss: each file
    flushed and dropped from the page cache first, then read whole into a fresh buffer with
    :func:`read_dropping_pages`, one after the other (the fresh buffers' page faults and the
    per-file calls included, which one large sequential read does not pay)."""
    files = [Path(p) for p in paths]
    if not files:
        raise ValueError("no files to measure the read bandwidth on")
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    t0 = time.perf_counter()
    total = sum(len(read_dropping_pages(path)) for path in files)
    return total / max(time.perf_counter() - t0, 1e-9)


_Version = tuple[int, int, int, int]


def _file_version(st: os.stat_result) -> _Version:
    """What changes whenever a file's bytes may have: inode (replaced by a rename), size,
    mtime and ctime (a write in place, even one that sets the mtime back, moves the ctime)."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class BufferedWeights(Mapping[str, torch.Tensor]):
    """Offloaded tensors of ``folder`` served through a :class:`BufferCache` of ``capacity``
    bytes under ``policy``; every file read is counted (``bytes_read``) and traced.

    Every read checks the file's version (:func:`_file_version`, one ``stat``): a file rewritten
    since it was cached (another model offloaded into the same folder) is read again, as
    accelerate's own loader, which reads the file at every forward, would; ``stale`` counts them."""

    def __init__(self, folder: str | Path, capacity: int, policy: str | Policy = "llm", *,
                 tracer: Tracer | None = None) -> None:
        self.folder = Path(folder)
        index_path = self.folder / "index.json"
        if not index_path.is_file():
            raise FileNotFoundError(f"{index_path} not found: not an accelerate offload folder")
        self.index: dict[str, dict[str, Any]] = json.loads(index_path.read_text())
        self.cache: BufferCache[tuple[torch.Tensor, _Version]] = BufferCache(capacity, policy)
        self.tracer = tracer
        self.stale = 0
        self.bytes_read = 0
        self.read_s = 0.0

    @property
    def stats(self) -> CacheStats:
        return self.cache.stats

    def total_bytes(self) -> int:
        return sum((self.folder / f"{k}.dat").stat().st_size for k in self.index)

    def __getitem__(self, key: str) -> torch.Tensor:
        info = self.index[key]
        path = self.folder / f"{key}.dat"
        version = _file_version(path.stat())
        if self.tracer is not None:
            self.tracer.record("r", path.name, 0, version[1], "")
        held = self.cache.peek(key)
        if held is not None and held[1] != version:
            self.cache.invalidate(key)
            self.stale += 1
        # A rewrite between the stat and the read leaves new bytes under the old version: the
        # next read's stat differs and reads the file again.
        return self.cache.get(key, lambda: self._load(path, info, version))[0]

    def _load(self, path: Path, info: dict[str, Any],
              version: _Version) -> tuple[tuple[torch.Tensor, _Version], int]:
        t0 = time.perf_counter()
        raw = read_dropping_pages(path)
        self.read_s += time.perf_counter() - t0
        self.bytes_read += len(raw)
        dtype = _dtype(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: offloaded dtype {info['dtype']!r} is not supported")
        shape = tuple(info["shape"]) or (1,)
        t = torch.frombuffer(raw, dtype=dtype).reshape(shape)
        if not info["shape"]:
            t = t[0]
        return (t, version), len(raw)

    def __iter__(self) -> Iterator[str]:
        return iter(self.index)

    def __len__(self) -> int:
        return len(self.index)


def dispatch_buffered(model: torch.nn.Module, device_map: Mapping[str, str],
                      weights: BufferedWeights, *, main_device: str = "cpu") -> torch.nn.Module:
    """Attach accelerate's hooks so the modules mapped to ``"disk"`` load their weights from
    ``weights`` before each forward (and drop them after), like ``dispatch_model``."""
    try:
        from accelerate.hooks import attach_align_device_hook_on_blocks  # type: ignore[import-untyped]
        from accelerate.utils import check_device_map  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("offloaded weights need accelerate: pip install accelerate") from exc
    check_device_map(model, dict(device_map))
    execution_device = {name: main_device if dev in ("cpu", "disk") else dev
                        for name, dev in device_map.items()}
    execution_device[""] = main_device
    offload = {name: dev == "disk" for name, dev in device_map.items()}
    attach_align_device_hook_on_blocks(model, execution_device=execution_device, offload=offload,
                                       offload_buffers=False, weights_map=weights)
    return model
