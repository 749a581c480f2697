"""RoPE layouts checked against the model itself, for families the profile table does not know.

A family missing from :data:`~.profile.PROFILES` gets a *guessed* profile (rotate-half over
the rotary module's frequencies). Guessing wrong is silent: shifted keys come out rotated the
wrong way and shifted reuse agrees with a full prefill on a fraction of tokens (interleaved
pairs as in GLM-4, Llama-4 or ERNIE-4.5 were served this way). :func:`verified_shifter` runs
one short forward at two position offsets, read by every candidate, and keeps the layout
(rotate-half or interleaved, rotary dims from the config or from the frequencies, in the
cache's keys or values) under which keys rotated by ``d`` equal keys computed ``d`` positions
later; when none does, the model is not shiftable, with the measured errors in the reason. Families in the table, and plugin overrides, are trusted as
stated (the conformance suite checks them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

import torch
from torch import nn
from transformers import DynamicCache

from ..cache_arg import cache_kw
from .profile import (
    NO_ROPE,
    PROFILES,
    ModelProfile,
    RopeSlot,
    resolve_profile,
    rotary_modules,
    text_config,
)
from .rope import NotShiftable, RopeShifter

__all__ = ["LayoutUnverified", "NOT_SHIFTABLE", "PROBE_TOKENS", "layout_error", "rope_keys",
           "verified_shifter"]

PROBE_TOKENS = 16
"""Tokens of the probe forward (run twice, at two offsets)."""
_OFFSET, _DELTA = 3, 37
_FP32_TOL, _HALF_TOL = 1e-4, 5e-2


class LayoutUnverified(NotShiftable):
    """No RoPE layout percache can apply reproduces the model's keys at shifted positions."""


def _forward(model: nn.Module, ids: torch.Tensor, positions: torch.Tensor) -> DynamicCache:
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=ids[None], position_ids=positions[None], **cache_kw(cache),
              use_cache=True)
    return cache


def _slot(cache: DynamicCache, slot: RopeSlot) -> list[torch.Tensor]:
    return [getattr(layer, slot)[0].float() for layer in cache.layers]


def rope_keys(model: nn.Module, ids: torch.Tensor, positions: torch.Tensor,
              slot: RopeSlot = "keys") -> list[torch.Tensor]:
    """Post-RoPE keys ``[kv_heads, T, head_dim]`` (fp32) of every cached layer for ``ids`` at
    ``positions``: the cache slot ``slot``, keys, or values where a cache of MLA latents keeps
    the RoPE key part (a config-less cache keeps full keys on sliding layers)."""
    return _slot(_forward(model, ids, positions), slot)


def _probe(model: nn.Module) -> tuple[DynamicCache, DynamicCache]:
    """The caches of the probe forward at its two offsets (every candidate layout reads them)."""
    param = next(model.parameters())
    vocab = int(getattr(text_config(model), "vocab_size", 0) or 256)
    ids = (torch.arange(PROBE_TOKENS, device=param.device) * 7 + 5) % max(vocab, 1)
    base = torch.arange(PROBE_TOKENS, device=param.device) + _OFFSET
    return _forward(model, ids, base), _forward(model, ids, base + _DELTA)


def layout_error(model: nn.Module, shifter: RopeShifter,
                 probe: tuple[DynamicCache, DynamicCache] | None = None) -> float:
    """Worst relative error, over RoPE layers, of keys rotated by the shifter against keys the
    model computes at the shifted positions (``probe``: the probe forward's caches, when they
    were computed already)."""
    at_p, moved = (_slot(cache, shifter.rope_slot) for cache in probe or _probe(model))
    worst = 0.0
    for i, (k, want) in enumerate(zip(at_p, moved, strict=False)):
        if i >= len(shifter.layer_rope) or shifter.layer_rope[i] == NO_ROPE:
            continue
        got = shifter.shift(k, i, _DELTA).float()
        if got.shape != want.shape:
            return float("inf")
        worst = max(worst, float((got - want).abs().max() / want.abs().max().clamp(min=1.0)))
    return worst


def _candidates(model: nn.Module, profile: ModelProfile) -> list[ModelProfile]:
    """Rotate-half and interleaved, over the config's rotary dims and over the rotary
    module's frequencies (they disagree for some families), in the keys; then the same in the
    values, where a cache of MLA latents keeps the RoPE key part (DeepSeek-V2/V3)."""
    dims: list[int | None] = [profile.rotary_dims]
    modules = rotary_modules(model)
    if modules:
        freqs = dict(modules[0].named_buffers(recurse=False)).get("inv_freq")
        if freqs is not None and 2 * freqs.numel() not in dims:
            dims.append(2 * freqs.numel())
    return [replace(profile, rotate=rotate, rotary_dims=d, rope_slot=slot)
            for slot in ("keys", "values") for rotate in ("half", "interleaved") for d in dims]


NOT_SHIFTABLE: Mapping[str, str] = MappingProxyType({
    "doge": "its attention adds a dynamic mask computed from the value states (top-k over the "
            "keys past keep_window_size) to the causal mask, which a splice mask does not "
            "reproduce (conformance: a recompute-all splice differs from a full prefill by 0.16 "
            "in first-token logits)",
    "phimoe": "a recompute-all splice differs from a full prefill by 0.15 in first-token logits "
              "on a tiny model although its RoPE layout checks out (sparsemixer routing "
              "thresholds are a suspected cause, not confirmed)",
    "moshi": "shifted reuse agreed with a full prefill on 0.19 of next tokens on a tiny model "
             "(floor 0.5) although the RoPE shift and recompute-all splice are exact; off until "
             "shown on real weights",
})
"""Families whose keys rotate as a RoPE layout says but whose shifted reuse the conformance
suite found wrong or poor; ``enable()`` reports shifted reuse not applicable with the reason (a
profile override passed by a plugin still wins)."""


def verified_shifter(model: nn.Module, override: ModelProfile | None = None, *,
                     table: Mapping[str, ModelProfile] | None = None) -> RopeShifter:
    """The shifter for ``model``; for a guessed profile, the layout the model confirms.

    :raises NotShiftable: the model cannot be shifted (:class:`LayoutUnverified` when no
        layout reproduces its keys).
    """
    config = text_config(model)
    if override is None and config.model_type in NOT_SHIFTABLE:
        raise NotShiftable(f"{config.model_type}: {NOT_SHIFTABLE[config.model_type]}")
    if override is not None or config.model_type in (PROFILES if table is None else table):
        return RopeShifter.from_model(model, override, table=table)
    try:
        guessed = resolve_profile(model, None, table)
    except ValueError as exc:  # unknown family showing no sign of its positions
        raise NotShiftable(str(exc)) from exc
    if guessed.positions != "rope":
        return RopeShifter.from_model(model, None, table=table)
    dtype = next(model.parameters()).dtype
    tol = _FP32_TOL if dtype in (torch.float32, torch.float64) else _HALF_TOL
    tried: list[str] = []
    probe: tuple[DynamicCache, DynamicCache] | None = None  # one probe forward for every candidate
    for cand in _candidates(model, guessed):
        try:
            shifter = RopeShifter.from_model(model, cand)
        except LayoutUnverified:
            raise
        except NotShiftable as exc:
            if "rotary dims" not in exc.reason:  # dynamic NTK, no rotary module, ...: final
                raise
            tried.append(f"{cand.rotate}/{cand.rotary_dims or 'from inv_freq'}: {exc.reason}")
            continue
        try:
            probe = probe or _probe(model)
            err = layout_error(model, shifter, probe)
        except Exception as exc:  # a model whose cache does not hold per-layer keys
            raise LayoutUnverified(f"{config.model_type}: RoPE layout cannot be probed "
                                   f"({type(exc).__name__}: {exc})") from exc
        if err <= tol:
            return shifter
        tried.append(f"{cand.rotate} over {shifter.rotary_dims} dims of the {cand.rope_slot}: "
                     f"rel err {err:.2g}")
    raise LayoutUnverified(
        f"{config.model_type}: not in the profile table, and no RoPE layout reproduces its keys "
        f"at shifted positions ({'; '.join(tried)}); keys may be transformed after RoPE or "
        "rotated in a way a ModelProfile cannot describe. Shifted reuse is off; register a "
        "ModelProfile if the family is shiftable")
