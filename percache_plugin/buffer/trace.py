"""Block-level access traces: the file format (docs/TRACES.md), a writer, a reader, analysis.

A trace is a CSV file with the header ``t,op,file,offset,size,cls``: one row per read (``op`` =
``r``) or write (``w``) of ``size`` bytes at ``offset`` of ``file``, ``t`` seconds after the
tracer started, ``cls`` the declared access class (``seq``, ``loop``, ``hot``) or empty.
"""

from __future__ import annotations

import csv
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = ["Access", "Tracer", "read_trace", "write_trace", "blocks", "TraceSummary", "summarize", "HEADER"]

HEADER: tuple[str, ...] = ("t", "op", "file", "offset", "size", "cls")


@dataclass(frozen=True)
class Access:
    """One row of a trace."""

    t: float
    op: str
    file: str
    offset: int
    size: int
    cls: str = ""

    def __post_init__(self) -> None:
        if self.op not in ("r", "w"):
            raise ValueError(f"trace op must be 'r' or 'w', got {self.op!r}")
        if self.offset < 0 or self.size < 0:
            raise ValueError(f"trace offset and size must be >= 0, got {self.offset}, {self.size}")


class Tracer:
    """Collects accesses in memory (``accesses``) and, with ``path``, appends them to a CSV
    trace (with ``append``, after the rows of an existing trace file, whose times restart at 0).
    Thread-safe; use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path | None = None, *, append: bool = False) -> None:
        self.accesses: list[Access] = []
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._fh: TextIO | None = None
        self._writer: Any = None
        if path is not None:
            cont = append and Path(path).is_file() and Path(path).stat().st_size > 0
            self._fh = open(path, "a" if cont else "w", newline="")  # noqa: SIM115 - closed in close()
            self._writer = csv.writer(self._fh)
            if not cont:
                self._writer.writerow(HEADER)

    def record(self, op: str, file: str, offset: int, size: int, cls: str = "") -> None:
        a = Access(time.perf_counter() - self._t0, op, file, offset, size, cls)
        with self._lock:
            self.accesses.append(a)
            if self._writer is not None:
                self._writer.writerow((f"{a.t:.6f}", a.op, a.file, a.offset, a.size, a.cls))

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
                self._writer = None

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trace(path: str | Path, accesses: Iterable[Access]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER)
        for a in accesses:
            w.writerow((f"{a.t:.6f}", a.op, a.file, a.offset, a.size, a.cls))


def read_trace(path: str | Path) -> list[Access]:
    """Parse a CSV trace; ValueError names the file and line of a bad row."""
    out = []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(header) != HEADER:
            raise ValueError(f"{path}: not a percache trace (header must be {','.join(HEADER)})")
        for line, row in enumerate(reader, start=2):
            try:
                t, op, file, offset, size, cls = row
                out.append(Access(float(t), op, file, int(offset), int(size), cls))
            except ValueError as exc:
                raise ValueError(f"{path}:{line}: bad trace row {row!r}: {exc}") from None
    return out


def blocks(accesses: Iterable[Access], block_size: int, *, reads_only: bool = True) -> Iterator[tuple[tuple[str, int], int, str]]:
    """``((file, block), block_size, cls)`` for every block each access touches."""
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    for a in accesses:
        if reads_only and a.op != "r":
            continue
        first = a.offset // block_size
        last = (a.offset + max(a.size, 1) - 1) // block_size
        for b in range(first, last + 1):
            yield (a.file, b), block_size, a.cls



@dataclass
class TraceSummary:
    """What ``percache trace`` reports: volume, distinct blocks, loops and the hot set."""

    reads: int
    writes: int
    bytes_read: int
    distinct_blocks: int
    loops: list[tuple[int, int]]  # (loop length in blocks, how many cycles seen)
    hot_blocks: int
    seq_blocks: int


def summarize(accesses: list[Access], block_size: int, *, hot_distance: int = 64) -> TraceSummary:
    """Classify the trace's blocks by reuse distance (in blocks read): read once = sequential,
    re-read within ``hot_distance`` = hot, otherwise loop; loops are grouped by their length."""
    last: dict[tuple[str, int], int] = {}
    distances: dict[tuple[str, int], list[int]] = defaultdict(list)
    n = 0
    for key, _, _ in blocks(accesses, block_size):
        if key in last:
            distances[key].append(n - last[key])
        last[key] = n
        n += 1
    hot = sum(1 for d in distances.values() if min(d) <= hot_distance)
    loop_len: dict[int, list[int]] = defaultdict(list)
    for d in distances.values():
        if min(d) > hot_distance:
            common = max(set(d), key=d.count)
            loop_len[_round(common)].append(len(d))
    loops = sorted((length, max(cycles)) for length, cycles in loop_len.items())
    return TraceSummary(
        reads=sum(1 for a in accesses if a.op == "r"),
        writes=sum(1 for a in accesses if a.op == "w"),
        bytes_read=sum(a.size for a in accesses if a.op == "r"),
        distinct_blocks=len(last),
        loops=loops,
        hot_blocks=hot,
        seq_blocks=len(last) - len(distances),
    )


def _round(n: int) -> int:
    """Group loop lengths within ~6%: two significant binary digits plus two."""
    if n < 16:
        return n
    shift = n.bit_length() - 5
    return (n >> shift) << shift
