"""The e2e replay's background record adds up what every idle call reported."""

from __future__ import annotations

from percache_plugin.bench.e2e_replay import Background
from percache_plugin.idle import IdleReport


def test_background_keeps_tasks_run_and_skipped_per_kind() -> None:
    bg = Background()
    first = IdleReport(tasks_run=2, by_kind={"warm": 1, "predict": 1}, skipped_by_kind={"warm": 3})
    second = IdleReport(tasks_run=1, by_kind={"warm": 1}, skipped_by_kind={"warm": 1, "answer": 2})
    bg.add(first, 1.5)
    bg.add(second, 0.5)
    assert bg.tasks_run == 3 and bg.seconds == 2.0
    assert bg.by_kind == {"warm": 2, "predict": 1}
    assert bg.skipped_by_kind == {"warm": 4, "answer": 2}
