"""The knowledge bank's snapshot lock: one writer of ``<directory>/index`` at a time, across
processes (a POSIX ``flock`` on ``<directory>/.lock``, dropped by the kernel when a process dies;
none on Windows)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..filemodes import FILE_MODE

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["snapshot_lock"]


@contextlib.contextmanager
def snapshot_lock(directory: Path) -> Iterator[None]:
    """Hold the bank's snapshot lock for the block."""
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
