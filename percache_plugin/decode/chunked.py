"""Prefill in chunks with a check between them, so that background (idle-time) work yields
to a foreground request, or stops at an explicit ``idle(budget_s=...)`` deadline, within one
chunk instead of after a whole prompt.

A causal forward over positions ``[a, c)`` equals a forward over ``[a, b)`` then ``[b, c)``
with the first one's K/V in the cache: each query only attends to keys at or before its own
position. The chunks give the same K/V up to floating-point reassociation (checked in the
tests: fp32 within 1e-5 on every tiny family, identical greedy output afterwards).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..cache_arg import cache_kw
from ..core.preemption import Preempted, Preemption
from .generate import dtype_device

if TYPE_CHECKING:
    from ..segments import Prompt
    from ..stats import GenerationStats

__all__ = ["StopCheck", "chunk_bounds", "interrupt_check", "prefill_chunked", "prefill_rest"]

StopCheck = Callable[[], bool]
"""Called before every chunk: True stops the prefill there."""


def chunk_bounds(start: int, end: int, chunk: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` cut into consecutive ``(a, b)`` of at most ``chunk`` positions.

    :raises ValueError: when ``chunk`` is not a positive int.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0:
        raise ValueError(f"prefill chunk must be a positive int, got {chunk!r}")
    for a in range(start, end, chunk):
        yield a, min(a + chunk, end)


def prefill_chunked(model: Any, input_ids: Sequence[int], cache: Any, start: int, end: int,
                    chunk: int, stop: StopCheck | None = None) -> int:
    """Run ``model`` over ``input_ids[start:end]``, appending to ``cache`` (which must hold
    exactly ``start`` positions), at most ``chunk`` tokens per forward.

    ``stop`` is called before every forward; when it returns True nothing more is computed.
    Explicit ``position_ids`` are passed (families that derive positions from the input ids
    would otherwise restart them at every chunk).

    :returns: the end of what was computed: ``end`` when it ran to completion, less when
        ``stop`` ended it (``cache`` then holds that many positions).
    """
    device = dtype_device(model)[1]
    done = start
    for a, b in chunk_bounds(start, end, chunk):
        if stop is not None and stop():
            return done
        ids = torch.tensor([list(input_ids[a:b])], device=device)
        positions = torch.arange(a, b, device=device)[None]
        with torch.inference_mode():
            model(input_ids=ids, position_ids=positions, **cache_kw(cache), use_cache=True)
        done = b
    return done


def interrupt_check(preemption: Preemption) -> StopCheck | None:
    """For a background request (made on the idle worker's thread) or one made while an
    explicit ``idle(budget_s=...)`` runs: the check between prefill chunks (a foreground
    request waits, or the budget passed). None for a foreground request: no check."""
    background, deadline = preemption.in_background(), preemption.deadline
    if not background and deadline is None:
        return None
    flag = preemption.flag

    def stop() -> bool:
        return (background and flag.is_set()) or (
            deadline is not None and time.perf_counter() >= deadline)

    return stop


def prefill_rest(model: Any, prompt: Prompt, cache: Any, stats: GenerationStats,
                 chunk: int, stop: StopCheck | None) -> int:
    """Compute the prompt positions ``cache`` does not hold yet, up to the last but one: with
    ``stop`` (a background request) in forwards of at most ``chunk`` tokens with ``stop``
    checked before each, without it in one forward.

    :returns: the positions now cached (``prompt.n_tokens - 1``, or more if a splice or a
        full hit already held them).
    :raises Preempted: when ``stop`` ended it (``stats.fallback`` says so; store nothing).
    """
    end = prompt.n_tokens - 1
    have = cache.get_seq_length()
    if have >= end:
        return have
    done = prefill_chunked(model, prompt.input_ids, cache, have, end, chunk if stop else end - have, stop)
    if done < end:
        stats.fallback = "preempted"
        raise Preempted("background prefill yielded to a foreground request or the idle budget")
    return done
