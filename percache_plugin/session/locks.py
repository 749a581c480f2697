"""One turn at a time per session name in a store, across handles and processes.

A turn holds an exclusive ``flock`` on ``sessions/locks/<hash of the name>.lock`` (one open
file per hold, so two handles in one process exclude each other as two processes do; the
kernel drops the lock when a process dies, so a crash never leaves a session held). The file
holds the holder's process id, for the message when a wait times out.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..filemodes import FILE_MODE, private_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: turns on one session are not coordinated
    fcntl = None  # type: ignore[assignment]

__all__ = ["SessionBusy", "SessionLocks", "LOCKS_DIR"]

LOCKS_DIR = "locks"


class SessionBusy(TimeoutError):
    """Another handle or process held the session for longer than ``Config.session_wait_s``."""


class SessionLocks:
    """The per-session locks of the store at ``root`` (None: no store, nothing to coordinate)."""

    def __init__(self, root: Path | None) -> None:
        self._dir = None if root is None else root / "sessions" / LOCKS_DIR

    @contextlib.contextmanager
    def hold(self, name: str, wait_s: float) -> Iterator[None]:
        """Hold session ``name`` for the duration of the block, waiting up to ``wait_s`` seconds.

        :raises SessionBusy: still held by another handle or process after ``wait_s``; the
            message names the session and the holder's process id."""
        if self._dir is None or fcntl is None:
            yield
            return
        path = private_dir(self._dir) / f"{hashlib.blake2b(name.encode(), digest_size=8).hexdigest()}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            _acquire(fd, name, wait_s)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock


def _acquire(fd: int, name: str, wait_s: float) -> None:
    deadline, pause = time.monotonic() + wait_s, 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise SessionBusy(_busy_message(fd, name, wait_s)) from None
            time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 2, 0.1)


def _busy_message(fd: int, name: str, wait_s: float) -> str:
    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
    who = f"process {holder}" + (" (another handle in this process)" if holder == str(os.getpid()) else "")
    return (f"session {name!r} is in use by {who}: waited {wait_s:g} s for its turn to end "
            f"(Config.session_wait_s); retry, or use another session name")
