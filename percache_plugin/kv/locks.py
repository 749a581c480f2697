"""The store's advisory locks: who may sweep a shared K/V directory, and who writes a node.

POSIX ``flock`` locks; the kernel drops them when a process dies. On Windows (no ``fcntl``)
stores sweep without coordination.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DirectoryLock", "WriteLock"]

log = logging.getLogger("percache")


class DirectoryLock:
    """A shared flock held while a store is open; ``exclusive`` if no other store had it.

    Only an exclusive opener may sweep: another live store's temp file is in-flight work,
    not a crash leftover. The kernel drops the lock when a process dies.
    """

    def __init__(self, kv_root: Path) -> None:
        self._fd: int | None = None
        self.exclusive = True
        if fcntl is None:  # pragma: no cover - Windows: sweep without coordination
            return
        self._fd = os.open(kv_root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.exclusive = False
            try:
                fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                # Only an admin change (store remove/purge/clear, memory forget) holds it
                # exclusively; they are short, but a silent wait looks like a hang.
                log.warning("percache: store %s is being changed by a maintenance command "
                            "(store remove/purge/clear or memory forget); waiting for it to "
                            "finish", kv_root.parent)
                fcntl.flock(self._fd, fcntl.LOCK_SH)

    def share(self) -> None:
        """Downgrade to shared once the sweep is done, letting other stores open."""
        if self._fd is not None and self.exclusive:
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            self.exclusive = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None


class WriteLock:
    """An exclusive flock on ``directory/name`` held while a node's file and row change together:
    publishing a file + inserting its row, or deleting rows + their files. Without it another
    process's delete could unlink a file whose row this process just inserted."""

    def __init__(self, directory: Path, name: str) -> None:
        self._fd: int | None = None
        if fcntl is not None:
            self._fd = os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600)

    def __enter__(self) -> WriteLock:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
