"""Checks of position-shifted reuse: the RoPE phase shift against direct computation, the
splice path with every position recomputed, and shifted reuse with the default strategy."""

from __future__ import annotations

import torch

from ..attention.profile import NO_ROPE, resolve_profile
from ..attention.rope_verify import rope_keys
from ..cache_arg import cache_kw
from ..handle import PerCache
from ..stats import GenerationStats
from .gate import build_shifter, shift_gate, suite_profile
from .result import Outcome, failed, not_applicable, passed
from .subject import CHUNKS, Subject, compare_generations, logits_tolerance, open_handle

__all__ = ["check_rope_shift", "check_splice_recompute_all", "check_shifted_reuse",
           "HALF_ROPE_TOL", "ROPE_TOL", "SHIFT_CASES"]

ROPE_TOL = 1e-4
"""Bound on the fp32 shift error relative to ``max(1, max|K|)`` (measured 1e-7..8e-5)."""
HALF_ROPE_TOL = 5e-2
"""The same bound for models computing in bf16/fp16 (their keys carry ~3 significant digits)."""
_CHUNK_TOKENS = 16
_OFFSET = 7
_DELTAS = (1, 64, 1024)

SHIFT_CASES: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...] = (
    ((0, 1, 2), (2, 0, 1), 0),
    ((1, 2, 3), (3, 2, 1), 1),
    ((0, 3, 1), (1, 3, 0), 2),
)
"""(chunk order when stored, chunk order when asked, query) of the shifted-reuse prompts."""


def _rel_errors(got: list[torch.Tensor], want: list[torch.Tensor]) -> list[float]:
    return [float((g - w).abs().max() / w.abs().max().clamp(min=1.0))
            for g, w in zip(got, want, strict=True)]


def _chunk_ids(subject: Subject) -> torch.Tensor:
    ids: list[int] = []
    while len(ids) < _CHUNK_TOKENS:
        ids += list(subject.tokenizer(" ".join(CHUNKS), add_special_tokens=False)["input_ids"])
    return torch.tensor(ids[:_CHUNK_TOKENS], device=subject.device)


def check_rope_shift(subject: Subject) -> Outcome:
    """Keys computed at positions ``p`` and rotated by ``d`` equal keys computed at ``p + d``,
    per layer, relative to ``max(1, max|K|)``."""
    model = subject.model
    profile = suite_profile(subject)
    shifter = build_shifter(model, profile)
    if isinstance(shifter, Outcome):
        return shifter
    notes = resolve_profile(model, profile).notes
    limit = subject.context or 2048
    deltas = [d for d in _DELTAS if _OFFSET + d + _CHUNK_TOKENS <= limit] or [1]
    ids = _chunk_ids(subject)
    base = torch.arange(_CHUNK_TOKENS, device=subject.device) + _OFFSET
    at_p = rope_keys(model, ids, base, shifter.rope_slot)
    per_layer = [0.0] * len(at_p)
    for d in deltas:
        moved = rope_keys(model, ids, base + d, shifter.rope_slot)
        shifted = [shifter.shift(k, i, d).float() for i, k in enumerate(at_p)]
        per_layer = [max(a, b) for a, b in zip(per_layer, _rel_errors(shifted, moved), strict=True)]
    unshifted = _rel_errors(at_p, moved)
    tol = ROPE_TOL if subject.dtype in (torch.float32, torch.float64) else HALF_ROPE_TOL
    worst = max(per_layer)
    layer = per_layer.index(worst)
    # the cache may hold fewer layers than the model: KV-sharing layers (Gemma 3n) store none
    rope_layers = [i for i, r in enumerate(shifter.layer_rope[: len(at_p)]) if r != NO_ROPE]
    least_moved = min(unshifted[i] for i in rope_layers)
    figure = f"max rel err {worst:.2g} (layer {layer}, d={','.join(map(str, deltas))})"
    details = {"per_layer": per_layer, "unshifted": unshifted, "tolerance": tol,
               "rotary_dims": shifter.rotary_dims, "rotate": shifter.rotate,
               "rope_slot": shifter.rope_slot}
    if not worst <= tol:
        return failed(f"RoPE shift error {worst:.3g} at layer {layer} exceeds {tol:g}: the profile's "
                      f"rotary dims ({shifter.rotary_dims}) or layout ({shifter.rotate!r}) do not "
                      f"match how the model rotates keys" + (f" [profile: {notes}]" if notes else ""),
                      figure, worst, **details)
    if not least_moved > 10 * tol:
        return failed(f"moving positions by {deltas[-1]} changed layer keys by only {least_moved:.3g}: "
                      "the keys do not carry the RoPE phase the profile describes", figure, worst,
                      **details)
    where = " (in the cache's values: MLA latents)" if shifter.rope_slot == "values" else ""
    return passed(figure, worst, f"{shifter.rotary_dims} rotary dims, {shifter.rotate}{where}",
                  **details)


def _fits(subject: Subject, pc: PerCache, prompts: list[list[str]]) -> Outcome | None:
    new = max(subject.options.new_tokens, subject.options.teacher_tokens)
    reason = next((r for r in (subject.too_long(pc, p, new) for p in prompts) if r), "")
    return not_applicable(reason) if reason else None


def check_splice_recompute_all(subject: Subject) -> Outcome:
    """Chunks reused at new positions with every position recomputed (``recompute="all"``)
    equal a full prefill: the splice machinery itself is exact."""
    stored, asked = subject.segments((0, 1, 2)), subject.segments((2, 0, 1))
    with open_handle(subject, reuse="shifted", recompute="all") as pc:
        gate = shift_gate(subject, pc) or _fits(subject, pc, [stored, asked])
        if gate is not None:
            return gate
        with pc.disabled():
            want = pc.generate(asked, **subject.greedy())
        pc.generate(stored, **subject.greedy())
        got = pc.generate(asked, **subject.greedy())
    assert want.first_logits is not None
    s = got.stats
    diff, problem = compare_generations(got, want, logits_tolerance(subject.dtype, want.first_logits),
                                        "recompute-all splice")
    figure = f"max|dlogits|={diff:.3g}; recomputed {s.tokens_recomputed}/{s.prompt_tokens}"
    if s.fallback:
        return failed(f"the splice fell back to a full prefill: {s.fallback}", figure, diff)
    if s.tokens_recomputed <= 0 or s.tokens_shifted != 0 or s.approximate:
        return failed(f"expected every shifted position recomputed, got {s.summary()}", figure, diff)
    if problem:
        return failed(problem, figure, diff)
    return passed(figure, diff)


def _teacher_forced(subject: Subject, pc: PerCache,
                    asked: list[str]) -> tuple[torch.Tensor, torch.Tensor, GenerationStats]:
    """Reference logits (full prefill, the model's own attention) along its greedy continuation,
    the shifted-reuse logits along the same tokens, and the shifted request's stats."""
    model = subject.model
    k = subject.options.teacher_tokens
    ids = torch.tensor([pc.prompt(asked).input_ids], device=subject.device)
    tok = subject.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with pc.disabled(), torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=k,
                             min_new_tokens=k, do_sample=False, pad_token_id=pad,
                             output_logits=True, return_dict_in_generate=True)
    teacher = out.sequences[:, ids.shape[1]:]
    ref = torch.cat([step[:1] for step in out.logits]).float()  # raw logits, one row per step
    pre = pc.prefill(asked)
    feed = torch.cat([ids[:, -1:], teacher[:, :-1]], dim=1)
    with torch.inference_mode():
        got = model(input_ids=feed, **cache_kw(pre.cache), use_cache=True).logits[0].float()
    return ref, got, pre.stats


def check_shifted_reuse(subject: Subject) -> Outcome:
    """Chunks cached in one order and asked in another, default recompute strategy: top-1
    agreement with a full prefill over teacher-forced tokens (informative; passes at
    ``min_agreement``)."""
    threshold = subject.options.min_agreement
    agree = total = shifted = recomputed = chunk_tokens = 0
    kl = 0.0
    strategy = ""
    for stored, asked, query in SHIFT_CASES:
        with open_handle(subject, reuse="shifted") as pc:  # a fresh store per case
            gate = shift_gate(subject, pc) or _fits(subject, pc, [
                subject.segments(stored, query), subject.segments(asked, query)])
            if gate is not None:
                return gate
            strategy = pc.config.recompute
            pc.prefill(subject.segments(stored, query))
            ref, got, stats = _teacher_forced(subject, pc, subject.segments(asked, query))
        if stats.fallback or stats.tokens_shifted + stats.tokens_recomputed == 0:
            return failed(f"no chunk was served shifted ({stats.summary()})")
        agree += int((ref.argmax(-1) == got.argmax(-1)).sum())
        total += ref.shape[0]
        logp, logq = ref.log_softmax(-1), got.log_softmax(-1)
        kl += float((logp.exp() * (logp - logq)).sum(-1).sum())
        shifted += stats.tokens_shifted
        recomputed += stats.tokens_recomputed
        chunk_tokens += stats.tokens_shifted + stats.tokens_recomputed
    rate = agree / total
    figure = (f"top-1 {rate:.2f} over {total} tokens (pass >= {threshold:.2f}); KL {kl / total:.2g}; "
              f"recomputed {recomputed}/{chunk_tokens}")
    details = {"agreement": rate, "kl": kl / total, "tokens": total, "strategy": strategy,
               "tokens_shifted": shifted, "tokens_recomputed": recomputed, "threshold": threshold}
    if rate < threshold:
        return failed(f"shifted reuse ({strategy}) agrees with a full prefill on {rate:.2f} of "
                      f"next tokens, below {threshold:.2f}", figure, rate, **details)
    return passed(figure, rate, f"recompute {strategy}", **details)

