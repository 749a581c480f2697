"""The cache-sizing model: a loop of N bytes runs without I/O stalls when N <= S + BW x T.

S is the cache held for the loop, BW the sustained storage bandwidth, T the fetch delay a token
tolerates (the compute that reads can overlap; 0 for the synchronous reads of accelerate's
hooks). With loop pinning (the LLM-aware policy) a token reads the N - S bytes not pinned; LRU
reads all N while N > S. The stall per token is what cannot be overlapped:
``max(0, (N - S) / BW - T)``.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Sizing", "size_loop", "measure_bandwidth", "weights_bytes"]


@dataclass(frozen=True)
class Sizing:
    """Prediction for one loop, cache and bandwidth (bytes, bytes/s, seconds)."""

    loop_bytes: int
    cache_bytes: int
    bandwidth: float
    tolerance_s: float
    fits: bool
    read_per_token_pinned: int
    read_per_token_lru: int
    stall_per_token_pinned_s: float
    stall_per_token_lru_s: float
    cache_needed_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def size_loop(loop_bytes: int, cache_bytes: int, bandwidth: float, tolerance_s: float = 0.0) -> Sizing:
    """Evaluate N <= S + BW x T and the bytes and stall per token under pinning and under LRU."""
    if loop_bytes < 0 or cache_bytes < 0 or bandwidth <= 0 or tolerance_s < 0:
        raise ValueError(f"need loop_bytes, cache_bytes, tolerance_s >= 0 and bandwidth > 0, got "
                         f"{loop_bytes}, {cache_bytes}, {tolerance_s}, {bandwidth}")
    s = min(cache_bytes, loop_bytes)
    pinned = loop_bytes - s
    lru = 0 if cache_bytes >= loop_bytes else loop_bytes
    return Sizing(
        loop_bytes=loop_bytes, cache_bytes=cache_bytes, bandwidth=bandwidth, tolerance_s=tolerance_s,
        fits=loop_bytes <= cache_bytes + bandwidth * tolerance_s,
        read_per_token_pinned=pinned, read_per_token_lru=lru,
        stall_per_token_pinned_s=max(0.0, pinned / bandwidth - tolerance_s),
        stall_per_token_lru_s=max(0.0, lru / bandwidth - tolerance_s),
        cache_needed_bytes=max(0, int(loop_bytes - bandwidth * tolerance_s)),
    )


def weights_bytes(folder: str | Path) -> int:
    """Bytes of the weight files under ``folder`` (``*.safetensors``, ``*.bin``, ``*.dat``,
    ``*.gguf``)."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder of weight files")
    return sum(p.stat().st_size for p in root.rglob("*")
               if p.is_file() and p.suffix in (".safetensors", ".bin", ".dat", ".gguf"))


def measure_bandwidth(folder: str | Path | None = None, size: int = 128 * 2**20,
                      block: int = 8 * 2**20) -> float:
    """Sustained sequential read bandwidth (bytes/s) of the file system holding ``folder``: a
    file of ``size`` bytes is written, fsynced, dropped from the page cache
    (``posix_fadvise(DONTNEED)``) and read back in ``block``-byte reads."""
    with tempfile.NamedTemporaryFile(dir=folder, prefix="percache-bw-") as fh:
        chunk = os.urandom(block)
        for _ in range(max(1, size // block)):
            fh.write(chunk)
        fh.flush()
        os.fsync(fh.fileno())
        fd = os.open(fh.name, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            total = 0
            while True:
                data = os.read(fd, block)
                if not data:
                    break
                total += len(data)
            elapsed = time.perf_counter() - t0
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return total / max(elapsed, 1e-9)
