"""The idle task ``calibrate``: the verify cost curve measured in idle time when none is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.assistant.calibrate_task import CALIBRATE_KIND
from percache_plugin.core.preemption import Preempted
from percache_plugin.decode.calibrate import measure_curve
from percache_plugin.decode.stored_cost import CurveLookup
from percache_plugin.idle import IdleQueue
from percache_plugin.kv.store import DB_NAME
from tests.helpers import SEGMENTS, tiny_pair


def _kinds(pc: percache.PerCache) -> list[str]:
    return [t.kind for t in pc.idle_queue.pending()]


def _stored(store: Path, pc: percache.PerCache) -> Any:
    lookup = CurveLookup(store / DB_NAME)
    try:
        return lookup.get(pc.fingerprint, pc.model, pc.engine.drafts.packs(pc.config))
    finally:
        lookup.close()


def test_enable_queues_the_task_and_does_not_measure(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        assert _kinds(pc) == [CALIBRATE_KIND]
        assert pc.stats().draft_cost_curve == "built-in"
        assert _stored(tmp_path, pc) is None
        assert CALIBRATE_KIND not in pc.background_stats.by_kind


@pytest.mark.parametrize("config", [{"drafting": False}, {"draft_verify_cost": (1.2, 1.3)},
                                    {"draft_calibrate_idle": False}])
def test_no_task_when_the_curve_is_not_needed(config: dict[str, Any]) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, **config) as pc:
        assert _kinds(pc) == []
        # turned back to what needs a curve: queued then
        pc.configure(drafting=True, draft_verify_cost=None, draft_calibrate_idle=True)
        assert _kinds(pc) == [CALIBRATE_KIND]


def test_the_task_measures_stores_and_a_later_handle_uses_the_curve(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        report = pc.idle()
        assert report.by_kind == {CALIBRATE_KIND: 1} and report.prefill_tokens > 0
        assert pc.background_stats.by_kind[CALIBRATE_KIND].prefill_tokens == report.prefill_tokens
        assert pc.stats().draft_cost_curve == "measured now"
        assert pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False).stats.draft_cost_curve == "measured now"
        stored = _stored(tmp_path, pc)
        assert stored is not None and len(stored.ratios) == 16 and min(stored.ratios) >= 1.0
    with percache.enable(model, tok, store=tmp_path) as pc:
        assert _kinds(pc) == []  # stored: not queued again
        assert pc.stats().draft_cost_curve.startswith("stored (measured ")


def test_a_task_no_longer_needed_is_skipped(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        pc.configure(draft_verify_cost=(1.2,))  # given after it was queued
        report = pc.idle()
        assert report.by_kind == {} and report.skipped_by_kind == {CALIBRATE_KIND: 1}
        assert _kinds(pc) == [] and _stored(tmp_path, pc) is None


def test_an_interrupted_measuring_stores_nothing_and_stays_queued(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        report = pc.idle(budget_s=0.001)  # the measuring takes far longer: stopped between forwards
        assert report.preempted == 1 and report.stopped_by == "budget"
        assert _kinds(pc) == [CALIBRATE_KIND]
        assert _stored(tmp_path, pc) is None
        assert pc.stats().draft_cost_curve == "built-in"


def test_measure_curve_stops_between_forwards_and_returns_nothing() -> None:
    model, _ = tiny_pair("llama")
    calls: list[int] = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 5

    with pytest.raises(Preempted):
        measure_curve(model, cached_tokens=40, max_k=4, repeats=2, progress=False, should_stop=stop,
                      prefill_chunk=16)
    assert len(calls) == 6  # 3 prefill chunks, then forwards until the check fired


def test_the_calibration_runs_after_every_other_runnable_task() -> None:
    queue = IdleQueue(None, last=(CALIBRATE_KIND,))
    queue.push(CALIBRATE_KIND, "verify cost", None)
    queue.push("answer", "q", None)
    first = queue.peek()
    assert first is not None and first.kind == "answer"
    queue.done(first)
    last = queue.peek()
    assert last is not None and last.kind == CALIBRATE_KIND
    queue.close()
