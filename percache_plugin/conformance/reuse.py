"""Checks of exact-prefix reuse: greedy tokens and logits equal a same-tokenization baseline,
through the on-disk store, across handles, on sliding-window layers, in fp32 and bf16."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..attention.profile import text_config
from ..stats import Generation
from .result import Outcome, failed, not_applicable, passed
from .subject import CHUNKS, Subject, compare_generations, logits_tolerance, open_handle

__all__ = [
    "check_exact_reuse",
    "check_store_roundtrip",
    "check_sliding_window",
    "check_fp32",
    "check_bf16",
    "sliding_window_of",
]


def _judge(want: Generation, runs: Sequence[tuple[str, Generation]], dtype: torch.dtype,
           extra: str = "") -> Outcome:
    """Pass when every run equals the baseline and the last one actually reused tokens."""
    assert want.first_logits is not None
    tol = logits_tolerance(dtype, want.first_logits)
    last = runs[-1][1]
    worst, problems = 0.0, []
    for what, got in runs:
        diff, problem = compare_generations(got, want, tol, what)
        worst = max(worst, diff)
        if problem:
            problems.append(problem)
    figure = f"max|dlogits|={worst:.3g}; reused {last.stats.tokens_reused}/{last.stats.prompt_tokens}"
    figure += extra
    details: dict[str, Any] = {"tolerance": tol, "tokens_reused": last.stats.tokens_reused,
               "prompt_tokens": last.stats.prompt_tokens, "dtype": str(dtype).removeprefix("torch.")}
    if problems:
        return failed("; ".join(problems), figure, worst, **details)
    if last.stats.tokens_reused <= 0:
        return failed(f"{runs[-1][0]} reused no tokens (prompt of {last.stats.prompt_tokens}): nothing was "
                      f"served from the store ({last.stats.summary()})", figure, worst, **details)
    return passed(figure, worst, **details)


Inspect = Callable[[Any, list[str]], str]
"""Called with the handle and the segments after the warm run; returns a problem or ``""``."""


def _cold_warm(subject: Subject, model: Any, segments: list[str],
               inspect: Inspect | None = None) -> tuple[Generation | None, Outcome]:
    """Baseline, cold and warm runs on a fresh on-disk store, and the judged outcome."""
    dtype = next(model.parameters()).dtype
    with tempfile.TemporaryDirectory(prefix="percache-conformance-") as tmp, \
            open_handle(subject, model=model, store=tmp) as pc:
        too_long = subject.too_long(pc, segments, subject.options.new_tokens)
        if too_long:
            return None, not_applicable(too_long)
        with pc.disabled():
            want = pc.generate(segments, **subject.greedy())
        cold = pc.generate(segments, **subject.greedy())
        warm = pc.generate(segments, **subject.greedy())
        problem = inspect(pc, segments) if inspect is not None else ""
    outcome = _judge(want, [("cold request", cold), ("warm request", warm)], dtype)
    if problem:
        return want, failed(problem, outcome.figure, outcome.value, **outcome.details)
    return want, outcome


def check_exact_reuse(subject: Subject) -> Outcome:
    """Cold and warm requests (chunks stored, then served from an on-disk store) give the
    baseline's greedy tokens and first-token logits within tolerance."""
    return _cold_warm(subject, subject.model, subject.segments())[1]


def check_store_roundtrip(subject: Subject) -> Outcome:
    """Chunks stored by one handle are served, exactly, by a new handle on the same directory."""
    segments = subject.segments()
    with tempfile.TemporaryDirectory(prefix="percache-conformance-") as tmp:
        with open_handle(subject, store=tmp) as first:
            too_long = subject.too_long(first, segments, subject.options.new_tokens)
            if too_long:
                return not_applicable(too_long)
            with first.disabled():
                want = first.generate(segments, **subject.greedy())
            reusable = len(first.prompt(segments).reusable)
            first.generate(segments, **subject.greedy())
        with open_handle(subject, store=tmp) as second:
            nodes = len(second.store.nodes())
            again = second.generate(segments, **subject.greedy())
    if nodes != reusable:
        return failed(f"the reopened store holds {nodes} node(s), the first handle stored "
                      f"{reusable} reusable piece(s)", f"{nodes}/{reusable} nodes", float(nodes))
    return _judge(want, [("request on the reopened store", again)], subject.dtype,
                  f"; {nodes} nodes reopened")


def sliding_window_of(model: Any) -> int | None:
    """The sliding window of the model's sliding layers, or None if no layer slides."""
    cfg = text_config(model)
    window = getattr(cfg, "sliding_window", None)
    if not isinstance(window, int) or window <= 0 or getattr(cfg, "use_sliding_window", True) is False:
        return None
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types and not any("sliding" in str(t) for t in layer_types):
        return None
    return window


def _long_chunk(subject: Subject, pc: Any, need: int, budget: int) -> list[str] | None:
    """Segments whose prompt exceeds ``need`` tokens (None if that takes more than ``budget``)."""
    lines: list[str] = []
    base = [subject.segments()[0], "", subject.segments()[-1]]
    while True:
        n = len(lines)
        lines.append(f"Note {n + 1}: {CHUNKS[n % len(CHUNKS)]}")
        segments = [base[0], "\n".join(lines), base[2]]
        length = pc.prompt(segments).n_tokens
        if length > need:
            return segments
        if length > budget:
            return None


def check_sliding_window(subject: Subject) -> Outcome:
    """On a prompt longer than the sliding window, stored chunks keep every position's K/V on
    every layer, and a warm request equals the baseline."""
    window = sliding_window_of(subject.model)
    if window is None:
        return not_applicable("no sliding-window layers (config.sliding_window unset or unused)")
    budget = subject.options.max_window_tokens
    need = window + 16
    if need > budget:
        return not_applicable(f"the sliding window ({window} tokens) is longer than the check's "
                              f"prompt budget ({budget}); raise max_window_tokens to run it")
    limit = subject.context
    if isinstance(limit, int) and need + subject.options.new_tokens > limit:
        return not_applicable(f"the sliding window ({window}) is as long as the context ({limit})")
    with open_handle(subject) as probe:
        segments = _long_chunk(subject, probe, need, budget)
    if segments is None:
        return not_applicable(f"could not build a prompt over {need} tokens within {budget}")
    want, outcome = _cold_warm(subject, subject.model, segments, _full_length)
    if want is None:
        return outcome
    return _with_window(outcome, window, want.stats.prompt_tokens)


def _full_length(pc: Any, segments: list[str]) -> str:
    """Every stored piece holds K/V for all of its tokens on every layer."""
    for piece in pc.prompt(segments).reusable:
        kv = pc.store.get(piece.key, token_ids=piece.token_ids)
        if kv is None:
            return f"the piece at {piece.start} was not stored (or failed to load)"
        short = [i for i, k in enumerate(kv.keys) if k.shape[-2] != piece.n_tokens]
        if short:
            return (f"stored K/V of the piece at {piece.start} covers {kv.keys[short[0]].shape[-2]} "
                    f"of {piece.n_tokens} tokens on layers {short}: sliding layers were truncated")
    return ""


def _with_window(outcome: Outcome, window: int, prompt_tokens: int) -> Outcome:
    figure = f"{outcome.figure}; window {window} < prompt {prompt_tokens}"
    details = {**outcome.details, "sliding_window": window}
    return type(outcome)(outcome.status, figure, outcome.value, outcome.message, details)


def _dtype_check(subject: Subject, dtype: torch.dtype) -> Outcome:
    name = str(dtype).removeprefix("torch.")
    model = subject.model
    if subject.dtype != dtype:
        params = sum(p.numel() for p in model.parameters())
        if params > subject.options.max_copy_params:
            return not_applicable(f"the model is {subject.dtype}; a {name} copy of {params:,} "
                                  f"parameters is over the limit of {subject.options.max_copy_params:,}")
        model = copy.deepcopy(model).to(dtype)
    try:
        return _cold_warm(subject, model, subject.segments((1,), query=1))[1]
    finally:
        del model


def check_fp32(subject: Subject) -> Outcome:
    """Exact reuse on the model in float32 (a copy when it is loaded in another dtype)."""
    return _dtype_check(subject, torch.float32)


def check_bf16(subject: Subject) -> Outcome:
    """Exact reuse on the model in bfloat16 (a copy when it is loaded in another dtype)."""
    return _dtype_check(subject, torch.bfloat16)
