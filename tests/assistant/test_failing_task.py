"""A task that keeps raising must not spin the idle worker nor hold back the tasks behind it."""

from __future__ import annotations

import threading
import time
from typing import Any

import percache_plugin as percache
from tests.helpers import tiny_pair


class Tasks:
    """A ``boom`` kind that always raises and a ``tally`` kind that records its run."""

    def __init__(self) -> None:
        self.booms = 0
        self.tallied = threading.Event()

    @percache.hookimpl
    def percache_register_idle_tasks(self, register: Any) -> None:
        def boom(ctx: Any, task: Any, report: Any) -> None:
            self.booms += 1
            raise RuntimeError("disk full")

        def tally(ctx: Any, task: Any, report: Any) -> None:
            self.tallied.set()
        register("boom", boom)
        register("tally", tally)


def test_a_failing_task_backs_off_and_lets_the_next_run() -> None:
    model, tok = tiny_pair("llama")
    tasks = Tasks()
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", plugins=[tasks])
    try:
        assert pc.idle_queue.push("boom", "first", None)
        assert pc.idle_queue.push("tally", "second", None)
        worker = pc.start_idle_worker(poll_s=0.01)
        # Before: the oldest task was retried at once, forever, and "tally" never ran.
        assert tasks.tallied.wait(30), f"tally never ran; boom ran {tasks.booms} times"
        time.sleep(0.2)  # a spinning worker would retry boom many times meanwhile
        pc.stop_idle_worker()
        assert tasks.booms == 1 and worker.error_count == 1
        assert worker.errors == [repr(RuntimeError("disk full"))]
        # Nothing is lost: the failed task is still queued, runnable after its back-off.
        assert [t.kind for t in pc.idle_queue.pending()] == ["boom"]
        assert pc.idle_queue.peek() is None and pc.idle_queue.peek(ignore_quiet=True) is not None
    finally:
        pc.close()


def test_the_back_off_doubles_and_is_capped() -> None:
    from percache_plugin.idle import IdleQueue

    q = IdleQueue(None, kinds=("answer",))
    q.push("answer", "q", None)
    task = q.peek()
    assert task is not None
    delays = [q.failed(task) for _ in range(12)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0] and delays[-1] == 300.0
    q.done(task)
    q.push("answer", "q", None)
    again = q.peek()
    assert again is not None and q.failed(again) == 1.0  # a new task starts from 1 s
    q.close()
