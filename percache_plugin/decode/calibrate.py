"""Measuring the verify cost curve (:class:`~percache_plugin.decode.cost.VerifyCost`) of a model
on the machine it runs on: the time of a forward feeding the pending token plus ``k`` draft
tokens over a cache, against a one-token forward.

A forward keeps ``k + 1`` logits (``logits_to_keep``, as the drafted decoding loop does) and the
cache is cropped back after it, so every forward sees the same cache. The values of ``k`` are
interleaved in every repeat (forwards, then backwards), so a change of load during the run
touches every ``k`` alike; the first rounds warm up and are not counted. A measuring stopped
between forwards (idle time yielding to a request) keeps what it timed in its
:class:`CalibrationProgress`, and the next run times only the forwards still missing, so short
idle gaps add up to a curve. ``benchmarks/verify_cost.py``
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

__all__ = ["Route", "time_forwards", "measure_curve", "check_arguments", "fit_cached",
           "synchronizer", "WARMUP_ROUNDS", "MEASURE_DEFAULTS", "CalibrationProgress", "MeasuringStopped"]

Route = Callable[[int], AbstractContextManager[Any]]
"""The context a forward feeding ``k`` draft tokens runs in (e.g. packed linear weights for ``k >= 1``)."""

WARMUP_ROUNDS = 2
MEASURE_DEFAULTS: Mapping[str, int] = MappingProxyType({"cached_tokens": 1500, "max_k": 16, "repeats": 9})
"""What ``pc.measure_verify_cost()`` and the idle ``calibrate`` task measure by default."""
Times = dict[tuple[str, int], list[float]]


@dataclass
class CalibrationProgress:
    """One curve's measuring across the runs that preemptions cut it into (the caller keeps one
    per model, machine and arguments), and what those runs cost.

    :ivar times: seconds of each forward timed so far, by ``(set-up, k)``; kept when a run stops.
    :ivar runs: runs started; ``preempted``: runs stopped between forwards.
    :ivar tokens: tokens every run computed (the cache, warm-up and timed forwards).
    :ivar tokens_abandoned: of those, what stopped runs computed that no kept time stands for:
        the cache each built and its warm-up forwards (the next run computes them again).
    :ivar finished: the last run returned a curve (a new run starts from no times).
    """

    times: Times = field(default_factory=dict)
    runs: int = 0
    preempted: int = 0
    tokens: int = 0
    tokens_abandoned: int = 0
    finished: bool = False

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
                  step: Callable[[int, bool], object] | None = None, times: Times | None = None) -> Times:
    """Seconds of each forward, by set-up (a name of ``routes``) and ``k``: ``repeats`` of each,
    timed in rounds after :data:`WARMUP_ROUNDS` uncounted ones.

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
    while r < WARMUP_ROUNDS or any(len(times[s, k]) < repeats for s in names for k in ks):
        timed = r >= WARMUP_ROUNDS
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
    :class:`MeasuringStopped` (a ``Preempted``). The forwards it timed stay in ``resume``: a later
    call with it builds the cache, warms up and times only the forwards still missing, then
    returns the curve of all of them (``resume.finished``); its counters say what the runs cost.

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
    if state.finished:
        state.times, state.finished = {}, False
    state.runs += 1
    spent = [0, 0]  # this run's tokens, and those no kept time stands for (cache, warm-up)

    def stopped() -> MeasuringStopped:
        state.preempted += 1
        state.tokens += spent[0]
        state.tokens_abandoned += spent[1]
        return MeasuringStopped(spent[0])

    vocab = int(model.config.get_text_config(decoder=True).vocab_size)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (cached_tokens + max_k + 1,), generator=gen).tolist()
    ks = list(range(max_k + 1))
    missing = sum(max(0, repeats - len(state.times.get(("", k), []))) for k in ks)
    cache = DynamicCache()
    with torch.inference_mode(), tqdm(total=WARMUP_ROUNDS * len(ks) + missing, desc="verify cost",
                                      unit="forward", delay=2.0, disable=not progress) as bar:
        if should_stop is None:
            model(input_ids=torch.tensor([ids[:cached_tokens]], device=_device(model)),
                  past_key_values=cache, use_cache=True, logits_to_keep=1)
            spent[:] = [cached_tokens, cached_tokens]
        else:
            done = prefill_chunked(model, ids, cache, 0, cached_tokens, prefill_chunk, should_stop)
            spent[:] = [done, done]
            if done < cached_tokens:
                raise stopped()

        def step(k: int, timed: bool) -> None:
            bar.update()
            spent[0] += k + 1
            spent[1] += 0 if timed else k + 1
            if should_stop is not None and state.points < len(ks) * repeats and should_stop():
                raise stopped()  # not after the last forward: the curve is complete

        times = time_forwards(model, cache, ids, cached_tokens, ks, {"": route}, repeats, step=step,
                              times=state.times)
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
