"""One request through the reuse pipeline: plan, load and splice the request's cache through
the hooks; once the model ran, store what it computed, account it and fire ``request_end``.

:class:`~percache_plugin.engine.Engine` calls :func:`open_request` for every ``generate()``
and ``prefill()`` on an enabled handle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .decode import context_limit, context_note
from .decode.chunked import StopCheck
from .kv.cache import empty_cache, wait_layers
from .kv.layer_read import CorruptLayerError
from .kv.planner import ReusePlan
from .reuse import PlanError, ReuseRunner, store_computed
from .segments import Prompt
from .stats import Generation, GenerationStats, StatsTotals

if TYPE_CHECKING:
    from .hooks.contexts import EngineContext

__all__ = ["ContextLengthError", "Finish", "Opened", "Prefilled", "PromptOnce", "check_length", "open_request",
           "recompute_on_corrupt"]

log = logging.getLogger("percache")
T = TypeVar("T")

Finish = Callable[[Any, "Generation | None", bool], None]
"""``finish(cache, generation, completed)``: store and account a completed request, and fire
``request_end`` (always)."""


@dataclass
class Prefilled:
    """The result of :meth:`Engine.prefill <percache_plugin.engine.Engine.prefill>`: the prompt,
    a cache over all positions but the last, and the request's stats."""

    prompt: Prompt
    cache: Any
    stats: GenerationStats


@dataclass
class Opened:
    """A request whose cache is built: it serves ``served`` prompt positions; call ``finish``
    exactly once after the model ran (or failed)."""

    cache: Any
    served: int
    stats: GenerationStats
    finish: Finish


class ContextLengthError(ValueError):
    """A prompt that, with the new tokens asked for, does not fit the model's context; the
    numbers are attributes, so a caller can cap ``max_new_tokens`` by the room left or say
    which part is too long (the server does both)."""

    def __init__(self, message: str, *, prompt_tokens: int, max_new_tokens: int, limit: int) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.limit = limit


def check_length(model: Any, prompt: Prompt, max_new: int) -> None:
    """Refuse a prompt that, with ``max_new`` new tokens, exceeds the model's context.

    :raises ContextLengthError: (a ``ValueError``) with the prompt's length and the limit."""
    limit = context_limit(model)
    if limit is not None and prompt.n_tokens + max_new > limit:
        raise ContextLengthError(
            f"prompt of {prompt.n_tokens} tokens plus max_new_tokens={max_new} exceeds the "
            f"model's context of {limit} tokens{context_note(model)}",
            prompt_tokens=prompt.n_tokens, max_new_tokens=max_new, limit=limit)


class PromptOnce:
    """A streamer wrapper that sends the prompt once although the request may run twice: the
    first ``put`` of each attempt is the prompt (``generate`` sends it before decoding), and a
    second attempt's is dropped if the first attempt's got through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._sent = False
        self._first = True

    def again(self) -> None:
        """A new attempt starts: its first ``put`` is the prompt again."""
        self._first = True

    def put(self, value: Any) -> None:
        if self._first:
            self._first = False
            if self._sent:
                return
            self._sent = True
        self.inner.put(value)

    def end(self) -> None:
        self.inner.end()


def recompute_on_corrupt(attempt: Callable[[int], T], kwargs: dict[str, Any] | None = None) -> T:
    """``attempt(aborted)``, run again once if a K/V layer read in the background failed its
    check mid-forward (:class:`~percache_plugin.kv.layer_read.CorruptLayerError`: the forward
    produced nothing and the store dropped the node). The second attempt (``aborted`` 1) plans
    afresh and reads whole files, each checked before its use, so it cannot abort again. A
    ``streamer`` in ``kwargs`` (the ``generate`` arguments) is wrapped in :class:`PromptOnce`,
    so a caller streaming the output sees the prompt once."""
    once = None
    if kwargs is not None and kwargs.get("streamer") is not None:
        kwargs["streamer"] = once = PromptOnce(kwargs["streamer"])
    try:
        return attempt(0)
    except CorruptLayerError as exc:
        log.warning("percache: %s; the node is dropped and the request computed again", exc)
        if once is not None:
            once.again()
        return attempt(1)


def open_request(ctx: EngineContext, runner: ReuseRunner, prompt: Prompt, t0: float,
                 totals: StatsTotals, enabled: Callable[[], bool], *, chunk: int | None = None,
                 stop: StopCheck | None = None, aborted: int = 0, exact_only: bool = False) -> Opened:
    """Fire ``request_start``, plan (``percache_plan_reuse``), load exact and shifted K/V, and
    build the cache (a splice that cannot run falls back to a full prefill, said in
    ``stats.fallback``). ``request_end`` fires if this raises. ``enabled()`` is asked at finish
    time: a handle disabled meanwhile stores nothing. ``chunk`` and ``stop`` (a background
    request) run a splice's forward in chunks with ``stop`` checked between them
    (:meth:`ReuseRunner.splice <percache_plugin.reuse.ReuseRunner.splice>`). ``aborted``: an
    earlier attempt of this request was aborted by a corrupt layer (counted in
    ``stats.corrupt_aborts``; the K/V is then read whole, checked before use). ``exact_only``:
    the plan's shifted pieces are dropped (computed instead, exactly)."""
    stats = GenerationStats(prompt_tokens=prompt.n_tokens, corrupt_aborts=aborted)
    store = ctx.store
    errors_before = store.write_errors
    ctx.hooks.request_start(ctx, prompt)
    try:
        plan = ctx.hooks.plan_reuse(ctx, prompt)
        if exact_only and plan.shifted:
            plan = ReusePlan(plan.exact, note=f"{plan.note}; shifted reuse off for this request")
        runner.prefetch(prompt, plan)
        exact = runner.load_exact(prompt, plan, stats, layered=not aborted)
        shifted = runner.load_shifted(prompt, plan, stats)
        stats.load_s = time.perf_counter() - t0
        if shifted:
            try:
                cache, served, exact_end = runner.splice(prompt, exact, shifted, plan, stats,
                                                         chunk=chunk, stop=stop)
            except PlanError as exc:
                log.warning("percache: falling back to a full prefill: %s", exc)
                stats = GenerationStats(prompt_tokens=prompt.n_tokens, fallback=str(exc))
                cache, served, exact_end = empty_cache(), 0, 0
        else:
            cache, served, exact_end = runner.exact_cache(prompt, exact, stats)
    except BaseException:
        totals.plugin_errors += ctx.hooks.request_end(ctx, prompt, stats, None)
        raise
    skip = {sp.index for sp in plan.shifted}

    def finish(cache: Any, gen: Generation | None, completed: bool) -> None:
        try:
            if completed:
                wait_layers(cache)  # a prefill that ran no forward hands out only checked K/V
                if enabled():
                    store_computed(ctx, prompt, exact_end, skip,
                                   bool(shifted) and stats.approximate, cache, stats)
                stats.store_errors += store.write_errors - errors_before
                stats.total_s = time.perf_counter() - t0
                totals.add(stats)
        finally:  # an observer that raises is logged and counted: the answer is kept
            failed = ctx.hooks.request_end(ctx, prompt, stats, gen)
            stats.plugin_errors += failed
            totals.plugin_errors += failed

    return Opened(cache, served, stats, finish)
