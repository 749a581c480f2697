"""Measuring the verify cost curve (:class:`~percache_plugin.decode.cost.VerifyCost`) of a model
on the machine it runs on: the time of a forward feeding the pending token plus ``k`` draft
tokens over a cache, against a one-token forward.

A forward keeps ``k + 1`` logits (``logits_to_keep``, as the drafted decoding loop does) and the
cache is cropped back after it, so every forward sees the same cache. The values of ``k`` are
interleaved in every repeat (forwards, then backwards), so a change of load during the run
touches every ``k`` alike; the first rounds warm up and are not counted. A measuring stopped
between forwards (idle time yielding to a request) keeps what it timed and the cache it built
in its :class:`CalibrationProgress`; the next run warms up one round and times only the
forwards still missing, so short idle gaps add up to a curve. ``benchmarks/verify_cost.py``
runs :func:`time_forwards` over several set-ups side by side; :meth:`PerCache.measure_verify_cost`
runs :func:`measure_curve` over the handle's own model and set-up.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from ..core.preemption import Preempted
from .chunked import StopCheck, prefill_chunked
from .generate import context_limit

__all__ = ["Route", "time_forwards", "measure_curve", "check_arguments", "fit_cached", "synchronizer",
           "WARMUP_ROUNDS", "RESUME_WARMUP_ROUNDS", "MEASURE_DEFAULTS", "CalibrationProgress", "MeasuringStopped"]

Route = Callable[[int], AbstractContextManager[Any]]
"""The context a forward feeding ``k`` draft tokens runs in (e.g. packed linear weights for ``k >= 1``)."""

WARMUP_ROUNDS = 2
RESUME_WARMUP_ROUNDS = 1
"""Warm-up rounds of a run resuming a stopped measuring (the model ran other requests meanwhile;
its first rounds already warmed up the shapes and allocations of the first run)."""
MEASURE_DEFAULTS: Mapping[str, int] = MappingProxyType({"cached_tokens": 1500, "max_k": 16, "repeats": 9})
"""What ``pc.measure_verify_cost()`` and the idle ``calibrate`` task measure by default."""
Times = dict[tuple[str, int], list[float]]


@dataclass
class CalibrationProgress:
    """One curve's measuring across the runs that preemptions cut it into (the caller keeps one
    per model, machine and arguments), and what those runs cost.

    :ivar times: seconds of each forward timed so far, by ``(set-up, k)``; kept when a run stops.
    :ivar cache: the measuring's cache (random ids) as a stopped run left it, holding ``cached``
        positions; None once the measuring finished or was discarded.
    :ivar runs: runs started; ``preempted``: runs stopped between forwards.
    :ivar tokens: tokens every run computed (the cache, warm-up and timed forwards).
    :ivar tokens_abandoned: of those, what no curve stands for: the warm-up forwards of stopped
        runs, and whatever :meth:`discard` dropped.
    :ivar finished: the last run returned a curve (a new run starts from nothing).
    """

    times: Times = field(default_factory=dict)
    cache: Any = None
    cached: int = 0
    runs: int = 0
    preempted: int = 0
    tokens: int = 0
    tokens_abandoned: int = 0
    finished: bool = False

    def discard(self) -> None:
        """Drop the kept times and cache (counted as abandoned): the next run starts afresh."""
        if not self.finished:
            self.tokens_abandoned += self.cached + sum((k + 1) * len(v) for (_, k), v in self.times.items())
        self.times, self.cache, self.cached, self.finished = {}, None, 0, False

    @property
    def points(self) -> int:
        """Forwards timed and kept."""
        return sum(len(v) for v in list(self.times.values()))  # read by pc.stats() in another thread


class MeasuringStopped(Preempted):
    """A measuring stopped between forwards; ``tokens``: what this run computed."""

    def __init__(self, tokens: int) -> None:
        super().__init__("verify cost measuring yielded to a foreground request or the idle budget")
        self.tokens = tokens


def time_forwards(model: Any, cache: Any, ids: Sequence[int], cached: int, ks: Sequence[int],
                  routes: Mapping[str, Route], repeats: int, *,
                  inputs: Callable[[str, int], dict[str, Any]] | None = None,
                  step: Callable[[int, bool], object] | None = None, times: Times | None = None,
                  warmup: int = WARMUP_ROUNDS) -> Times:
    """Seconds of each forward, by set-up (a name of ``routes``) and ``k``: ``repeats`` of each,
    timed in rounds after ``warmup`` uncounted ones.

    :param cache: holds ``ids[:cached]``; cropped back to them after every forward.
    :param ids: at least ``cached + max(ks) + 1`` token ids: a forward feeds ``ids[cached:cached + k + 1]``.
    :param inputs: extra keyword arguments of a set-up's forward of ``k`` draft tokens.
    :param step: called after every forward with its ``k`` and whether it was timed (a progress
        bar's update; a raise there stops the timing, with what was timed left in ``times``).
    :param times: times kept from a stopped run, filled in place: after this call's own warm-up
        rounds only the forwards still missing are timed.
    """
    names = list(routes)
    sync = synchronizer(_device(model))
    times = {} if times is None else times
    for key in ((s, k) for s in names for k in ks):
        times.setdefault(key, [])
    r = 0
    while r < warmup or any(len(times[s, k]) < repeats for s in names for k in ks):
        timed = r >= warmup
        for name in (names if r % 2 == 0 else names[::-1]):
            for k in (ks if r % 2 == 0 else ks[::-1]):
                if timed and len(times[name, k]) >= repeats:
                    continue
                feed = torch.tensor([list(ids[cached:cached + k + 1])], device=_device(model))
                extra = inputs(name, k) if inputs is not None else {}
                with routes[name](k):
                    sync()
                    t0 = time.perf_counter()
                    model(input_ids=feed, past_key_values=cache, use_cache=True, logits_to_keep=k + 1, **extra)
                    sync()
                    dt = time.perf_counter() - t0
                cache.crop(-(k + 1))
                if timed:
                    times[name, k].append(dt)
                if step is not None:
                    step(k, timed)
        r += 1
    return times


def check_arguments(model: Any, cached_tokens: int, max_k: int, repeats: int) -> None:
    """Raise ValueError naming the first argument of :func:`measure_curve` that cannot be used."""
    for name, value in (("cached_tokens", cached_tokens), ("max_k", max_k), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    limit = context_limit(model)
    if limit is not None and cached_tokens + max_k + 1 > limit:
        raise ValueError(f"cached_tokens + max_k + 1 must fit the model's context of {limit} tokens, "
                         f"got cached_tokens={cached_tokens}, max_k={max_k}")


def fit_cached(model: Any, cached_tokens: int, max_k: int) -> int:
    """``cached_tokens``, or fewer where the model's context cannot hold them and ``max_k + 1``
    more (at least 1)."""
    limit = context_limit(model)
    return cached_tokens if limit is None else max(1, min(cached_tokens, limit - max_k - 1))


def measure_curve(model: Any, *, cached_tokens: int, max_k: int, repeats: int,
                  route: Route = lambda k: contextlib.nullcontext(), seed: int = 0,
                  progress: bool = True, should_stop: StopCheck | None = None,
                  prefill_chunk: int = 256, resume: CalibrationProgress | None = None) -> tuple[float, ...]:
    """The verify cost ratios of ``model`` for ``k = 1 .. max_k``: the median time of a forward
    feeding ``k + 1`` tokens over a cache of ``cached_tokens`` over the median of a one-token
    forward over it, all in ``route``.

    ``should_stop`` (idle-time measuring) is checked before every forward, the cache built in
    forwards of at most ``prefill_chunk`` tokens then; when it returns True the run stops with
    :class:`MeasuringStopped` (a ``Preempted``). The forwards it timed and its cache stay in
    ``resume``: a later call with it completes the cache, warms up :data:`RESUME_WARMUP_ROUNDS`
    and times only the forwards still missing, then returns the curve of all of them
    (``resume.finished``); its counters say what the runs cost.

    The cache holds random token ids (``seed``): a forward's time does not depend on which
    tokens it computes. Ratios below 1.0 (a verify forward measured faster than a one-token
    forward: timing noise, never a real saving) are clipped to 1.0, since the schedule would
    read them as drafts that cost less than nothing. ``progress`` shows a progress bar of the
    forwards once the measuring has taken 2 s.
    """
    check_arguments(model, cached_tokens, max_k, repeats)
    from tqdm import tqdm  # an import of a second or so, paid only when measuring
    from transformers import DynamicCache

    state = resume if resume is not None else CalibrationProgress()
    if state.finished or should_stop is None:  # a run that cannot stop measures all of it now
        state.discard()
    resumed = state.cache is not None
    cache, start = (state.cache, state.cached) if resumed else (DynamicCache(), 0)
    state.cache, state.cached = None, 0  # taken by this run; given back if it stops
    state.runs += 1
    spent = [0, 0]  # this run's tokens, and its warm-up's

    def stopped(positions: int) -> MeasuringStopped:
        state.cache, state.cached = cache, positions
        state.preempted += 1
        state.tokens += spent[0]
        state.tokens_abandoned += spent[1]
        return MeasuringStopped(spent[0])

    vocab = int(model.config.get_text_config(decoder=True).vocab_size)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (cached_tokens + max_k + 1,), generator=gen).tolist()
    ks = list(range(max_k + 1))
    missing = sum(max(0, repeats - len(state.times.get(("", k), []))) for k in ks)
    warmup = RESUME_WARMUP_ROUNDS if resumed else WARMUP_ROUNDS
    with torch.inference_mode(), tqdm(total=warmup * len(ks) + missing, desc="verify cost",
                                      unit="forward", delay=2.0, disable=not progress) as bar:
        if should_stop is None:
            model(input_ids=torch.tensor([ids[:cached_tokens]], device=_device(model)),
                  past_key_values=cache, use_cache=True, logits_to_keep=1)
            spent[0] = cached_tokens
        else:
            done = prefill_chunked(model, ids, cache, start, cached_tokens, prefill_chunk, should_stop)
            spent[0] = done - start
            if done < cached_tokens:
                raise stopped(done)

        def step(k: int, timed: bool) -> None:
            bar.update()
            spent[0] += k + 1
            spent[1] += 0 if timed else k + 1
            if should_stop is not None and state.points < len(ks) * repeats and should_stop():
                raise stopped(cached_tokens)  # not after the last forward: the curve is complete

        times = time_forwards(model, cache, ids, cached_tokens, ks, {"": route}, repeats, step=step,
                              times=state.times, warmup=warmup)
    state.tokens += spent[0]
    state.finished = True
    base = statistics.median(times["", 0][:repeats])
    return tuple(round(max(1.0, statistics.median(times["", k][:repeats]) / base), 3) for k in ks[1:])


def synchronizer(device: torch.device) -> Callable[[], object]:
    """What waits for ``device``'s queued work: a CUDA forward returns once its kernels are
    queued, so timing it without waiting measures the launches, not the forward."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")
