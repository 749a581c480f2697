"""One request at a time on the model: a single worker thread taking jobs in arrival order.

The handle's idle worker (``pc.start_idle_worker``) runs between requests and yields to them:
every request enters the engine through ``core.Preemption.foreground``, which stops a
background decode after its current token.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .errors import shutting_down

__all__ = ["JobRecord", "Runner"]


@dataclass(frozen=True)
class JobRecord:
    """What one finished job did (kept for the last ``Runner.history`` jobs).

    :ivar finish_reason: ``"stop"``, ``"length"``, ``"cancelled"`` (the client went away),
        ``"shutdown"`` (the server stopped it, or it was still queued) or ``"error"``.
    """

    kind: str
    finish_reason: str
    completion_tokens: int
    queue_s: float
    run_s: float


class Runner:
    """Runs jobs one after the other in one thread (the model serves one request at a time).

    :param pc: the percache handle every job runs on.
    :param idle_worker: start the handle's idle worker (background predictions between requests).
    :param history: how many finished jobs :attr:`records` keeps.
    """

    def __init__(self, pc: Any, *, idle_worker: bool = False, history: int = 256) -> None:
        self.pc = pc
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="percache-serve")
        self._lock = threading.Lock()
        self._waiting = 0
        self._stop_running: Callable[[], None] | None = None
        self.records: deque[JobRecord] = deque(maxlen=history)
        self.finished = 0  # jobs finished since the start, however they ended
        self.cancelled = 0  # of those, jobs whose client went away (finish_reason "cancelled")
        self.closing = False  # set by :meth:`shut`: no job starts or is taken any more
        self.idle_worker = idle_worker
        self.idle_report: Any = None  # the idle worker's report, once closed
        if idle_worker:
            pc.start_idle_worker()

    @property
    def waiting(self) -> int:
        """Jobs submitted and not finished (the one running included)."""
        with self._lock:
            return self._waiting

    def submit(self, kind: str, job: Callable[[float], Any],
               stop: Callable[[], None] | None = None) -> Future[Any]:
        """Queue ``job(queued_s)``; its result or exception comes back through the future. The
        job returns an object with ``finish_reason`` and ``completion_tokens`` (recorded).
        ``stop``: ends the job early once it runs (:meth:`stop_running`).

        :raises APIError: 503 ``server_shutting_down`` once :meth:`shut` was called."""
        submitted = time.perf_counter()
        with self._lock:
            if self.closing:
                raise shutting_down()
            self._waiting += 1

        def run() -> Any:
            started = time.perf_counter()
            with self._lock:
                self._stop_running = stop
            reason, tokens = "error", 0
            try:
                result = job(started - submitted)
                reason = str(getattr(result, "finish_reason", "done"))
                tokens = int(getattr(result, "completion_tokens", 0))
                return result
            finally:
                with self._lock:
                    self._stop_running = None
                    if reason == "cancelled" and self.closing:
                        reason = "shutdown"
                self._record(kind, reason, tokens, started - submitted, time.perf_counter() - started)

        def cancelled(future: Future[Any]) -> None:  # cancelled before it ran: run() records nothing
            if future.cancelled():
                self._record(kind, "shutdown" if self.closing else "cancelled", 0,
                             time.perf_counter() - submitted, 0.0)

        try:
            future = self._pool.submit(run)
        except BaseException:
            with self._lock:
                self._waiting -= 1
            raise
        future.add_done_callback(cancelled)
        return future

    def _record(self, kind: str, reason: str, tokens: int, queue_s: float, run_s: float) -> None:
        self.records.append(JobRecord(kind, reason, tokens, queue_s, run_s))
        with self._lock:
            self._waiting -= 1
            self.finished += 1
            self.cancelled += reason == "cancelled"

    def shut(self) -> None:
        """The server is shutting down: refuse new jobs and cancel the queued ones (the pool's
        ``cancel_futures``: their futures raise ``CancelledError``; recorded as ``"shutdown"``).
        The running job goes on until it ends or :meth:`stop_running` stops it."""
        with self._lock:
            self.closing = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    def stop_running(self) -> None:
        """End the running job at its next token (the server's grace period is over)."""
        with self._lock:
            stop = self._stop_running
        if stop is not None:
            stop()

    def close(self) -> None:
        """Finish the running job, drop the queued ones, stop the idle worker."""
        self.shut()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.idle_worker:
            self.idle_report = self.pc.stop_idle_worker()
