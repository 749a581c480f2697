"""The idle task ``calibrate``: the verify cost curve measured in idle time when none is stored."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.assistant.calibrate_task import CALIBRATE_KIND
from percache_plugin.core.preemption import Preempted
from percache_plugin.decode import chunked
from percache_plugin.decode.calibrate import CalibrationProgress, MeasuringStopped, measure_curve
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


class _Gaps:
    """A stop check that lets each run of the measuring make ``checks`` checks, then stops it:
    an idle gap that ends after as many forwards, the same length every time (no clock)."""

    def __init__(self, checks: int) -> None:
        self.checks = checks
        self.calls = 0

    def run(self) -> Callable[[], bool]:
        self.calls = 0

        def stop() -> bool:
            self.calls += 1
            return self.calls > self.checks

        return stop


def test_a_stopped_measuring_keeps_its_forwards_and_cache_and_finishes_after_enough_gaps() -> None:
    model, _ = tiny_pair("llama")
    kept = CalibrationProgress()
    gaps = _Gaps(8)  # 8 checks a run: before each prefill chunk, after each forward
    args = dict(cached_tokens=40, max_k=4, repeats=2, progress=False, prefill_chunk=16, resume=kept)
    # run 1: 3 prefill chunks, 6 of the 10 warm-up forwards (k = 0..4, then 4); nothing timed
    # runs 2 and 3: the cache kept, one warm-up round (5 forwards), then 4 timed forwards each
    seen = []
    for points in (0, 4, 8):
        with pytest.raises(MeasuringStopped):
            measure_curve(model, should_stop=gaps.run(), **args)
        assert kept.points == points and kept.cached == 40 and kept.cache is not None
        seen.append({key: list(v) for key, v in kept.times.items()})
    curve = measure_curve(model, should_stop=gaps.run(), **args)  # run 4: 5 warm-up, 2 timed
    assert len(curve) == 4 and kept.finished and kept.points == 10 and kept.cache is None
    assert all(kept.times[key][:len(v)] == v for key, v in seen[2].items())  # the earlier times are in it
    assert (kept.runs, kept.preempted) == (4, 3)
    assert kept.tokens_abandoned == (1 + 2 + 3 + 4 + 5 + 5) + 15 + 15  # stopped runs' warm-ups
    assert kept.tokens == 40 + 20 + 3 * 15 + 2 * 15  # the cache once, 4 warm-ups, 10 timed forwards


class _Ticks:
    """``perf_counter`` for the idle budget's check: every call moves it on by one second, so an
    ``idle(budget_s=n)`` stops the measuring after about ``n`` checks, whatever the machine."""

    def __init__(self) -> None:
        self.n = 0

    def perf_counter(self) -> float:
        self.n += 1
        return time.perf_counter() + self.n


def test_idle_gaps_shorter_than_the_measuring_add_up_to_a_stored_curve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = tiny_pair("llama")
    ticks = _Ticks()
    monkeypatch.setattr(chunked, "time", ticks)
    with percache.enable(model, tok, store=tmp_path) as pc:
        gaps = 0
        while _kinds(pc) and gaps < 30:
            ticks.n = 0
            # the first run checks before each of the cache's 24 chunks (1500 tokens, 64 a chunk)
            # and after each of its 34 warm-up forwards; a later one after 17 warm-up forwards;
            # then after each timed forward (153 in all)
            pc.idle(budget_s=60)
            gaps += 1
        stats = pc.stats()
        assert _kinds(pc) == [] and _stored(tmp_path, pc) is not None, f"not finished after {gaps} gaps"
        assert gaps > 3 and stats.calibration_runs == gaps and stats.calibration_preempted == gaps - 1
        assert stats.calibration_points == 0 and stats.draft_cost_curve == "measured now"
        assert stats.calibration_tokens_abandoned > 0
        # every run's compute is in the background stats, the stopped ones' too
        assert pc.background_stats.by_kind[CALIBRATE_KIND].prefill_tokens == stats.calibration_tokens


def test_measure_verify_cost_times_every_forward_now(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path, draft_calibrate_idle=False) as pc:
        args = dict(cached_tokens=40, max_k=4, repeats=2)
        with pytest.raises(MeasuringStopped):
            pc.engine.drafts.measure(pc.fingerprint, pc.config, pc.engine.stats(), **args,
                                     should_stop=_Gaps(16).run())
        # one prefill chunk, 10 warm-up forwards, then 6 timed ones (k = 0..4, then 4: 20 tokens)
        assert pc.stats().calibration_points == 6  # kept for the next run that can stop
        pc.measure_verify_cost(**args, progress=False)
        kept = next(iter(pc.engine.drafts.calibrations.values()))
        assert kept.finished and all(len(v) == 2 for v in kept.times.values())
        # the stopped run's cache and timed forwards, dropped, then a whole measuring
        assert kept.tokens_abandoned == 30 + 40 + 20  # its warm-up, then its cache and 6 timed forwards
        assert kept.tokens == 90 + 40 + 2 * 15 + 2 * 15
