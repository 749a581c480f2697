"""A background thread that runs idle work and yields to foreground requests at once."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.preemption import Preemption
from ..idle import IdleReport

__all__ = ["IdleWorker"]


class IdleWorker:
    """Runs idle work one task at a time (``step``) while no foreground request is waiting.

    A foreground call (ask, generate, prefill, add_documents) raises the shared preempt flag;
    a background prefill checks it between chunks of ``Config.background_prefill_chunk``
    tokens, a background decode after every token; either stops, the task stays queued, and the
    worker resumes it once the foreground is done. A task that raises stays queued and is
    retried after a growing back-off (``IdleQueue.failed``); ``error_count`` counts the failures
    and ``errors`` keeps the last ``MAX_ERRORS`` of them.
    """

    MAX_ERRORS = 100

    def __init__(self, step: Callable[[], IdleReport], has_work: Callable[[], bool],
                 preemption: Preemption, *, poll_s: float = 0.2) -> None:
        self._step = step
        self._has_work = has_work
        self._preemption = preemption
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="percache-idle", daemon=True)
        self.report = IdleReport()
        self.errors: list[str] = []
        self.error_count = 0

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()
        self._preemption.background = self._thread.ident

    def stop(self, timeout: float | None = 30.0) -> None:
        """Ask the worker to stop after the current decode step, and wait for it."""
        self._stop.set()
        self._preemption.flag.set()  # interrupt a running decode now
        self._thread.join(timeout)
        if self._preemption.background == self._thread.ident:
            self._preemption.background = None
        if not self._preemption.waiting():
            self._preemption.flag.clear()

    def _loop(self) -> None:
        self._preemption.background = threading.get_ident()
        while not self._stop.is_set():
            if self._preemption.flag.is_set():
                self._stop.wait(0.005)
                continue
            if not self._has_work():
                self._stop.wait(self._poll_s)
                continue
            try:
                r = self._step()
            except Exception as exc:  # noqa: BLE001 - a failing task must not kill the worker
                self.error_count += 1
                self.errors = [*self.errors[-(self.MAX_ERRORS - 1):], repr(exc)]
                continue
            self.report.tasks_run += r.tasks_run
            self.report.preempted += r.preempted
            self.report.prefill_tokens += r.prefill_tokens
            self.report.decode_tokens += r.decode_tokens
            self.report.flops += r.flops
            self.report.predicted.extend(r.predicted)
            for k, v in r.by_kind.items():
                self.report.by_kind[k] = self.report.by_kind.get(k, 0) + v
            for k, v in r.skipped_by_kind.items():
                self.report.skipped_by_kind[k] = self.report.skipped_by_kind.get(k, 0) + v
