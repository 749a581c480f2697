"""Foreground calls preempt background work: one object shared by the engine and the worker."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["Preemption", "Preempted"]


class Preemption:
    """The preempt flag, the count of waiting foreground calls and the background thread.

    A foreground call raises :attr:`flag` while it waits for or holds the lock; a background
    decode checks the flag after every token and stops. :attr:`background` names the thread
    whose calls count as background (the idle worker), None when there is none.
    """

    def __init__(self) -> None:
        self.flag = threading.Event()
        self.background: int | None = None
        # ``time.perf_counter()`` at which an explicit idle() call's budget ends: its decodes
        # stop after the token during which it passed. None outside such a call.
        self.deadline: float | None = None
        self._count = 0
        self._mutex = threading.Lock()

    def in_background(self) -> bool:
        """Whether the calling thread is the background one."""
        return self.background is not None and threading.get_ident() == self.background

    def waiting(self) -> bool:
        """Whether a foreground call waits for or holds the lock."""
        return self._count > 0

    @contextlib.contextmanager
    def foreground(self, lock: threading.RLock) -> Iterator[None]:
        """Hold ``lock`` for a foreground call, preempting background work first (a call from
        the background thread just takes the lock)."""
        if self.in_background():
            with lock:
                yield
            return
        with self._mutex:
            self._count += 1
            self.flag.set()
        try:
            with lock:
                yield
        finally:
            with self._mutex:
                self._count -= 1
                if self._count == 0:
                    self.flag.clear()


class Preempted(Exception):  # noqa: N818 - a control-flow signal
    """A background task stopped because a foreground request arrived; it stays queued."""
