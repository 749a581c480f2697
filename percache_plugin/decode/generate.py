"""Running ``model.generate`` over a prepared cache: first-token clock, preemption, limits."""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
)

from ..cache_arg import CACHE_ARGS, cache_kw
from ..segments import Prompt
from ..stats import Generation, GenerationStats
from .verify import DraftedDecoding

__all__ = ["CONTEXT_ATTRS", "context_limit", "context_note", "dtype_device", "greedy_reason",
           "longrope_limit", "run_generate"]


class _PreemptCheck(StoppingCriteria):
    """Stops a background generation after the current token when a foreground call waits,
    or once a deadline (``time.perf_counter()``) has passed."""

    def __init__(self, flag: threading.Event | None, deadline: float | None = None) -> None:
        self.flag = flag
        self.deadline = deadline
        self.fired = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.fired = self.fired or (self.flag is not None and self.flag.is_set()) or (
            self.deadline is not None and time.perf_counter() >= self.deadline)
        return torch.full((input_ids.shape[0],), self.fired, dtype=torch.bool,  # type: ignore[return-value]
                          device=input_ids.device)


class _FirstTokenClock(LogitsProcessor):
    """Records when the first next-token distribution is ready (time to first token)."""

    def __init__(self) -> None:
        self.t: float | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.t is None:
            self.t = time.perf_counter()
        return scores


CONTEXT_ATTRS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length",
                 "max_seq_len", "max_target_positions")
"""Config fields that bound the context: MPT names it ``max_seq_len``, Whisper's decoder
``max_target_positions``."""


def context_limit(model: Any) -> int | None:
    """The model's context length in tokens where its config names one: the smallest of the
    :data:`CONTEXT_ATTRS` it has (a config may carry a generic field beside its own, smaller
    one, as MPT does with ``max_seq_len``), and of :func:`longrope_limit`."""
    cfg = model.config.get_text_config(decoder=True)
    found = [limit] if (limit := longrope_limit(model)) is not None else []
    for attr in CONTEXT_ATTRS:
        try:
            value = getattr(cfg, attr, None)
        except Exception:  # a per-layer attribute that refuses a global read
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found.append(value)
    return min(found, default=None)


def longrope_limit(model: Any) -> int | None:
    """``original_max_position_embeddings`` of a longrope model (Phi-3 and Phi-3.5 128k, Phi-4
    mini): past it, every forward whose positions reach beyond it rotates all its positions with
    the long factors instead of the short ones, so the K/V of a prompt depends on the length of
    the prompt it was computed in, and K/V reused from a shorter (or longer) one differs from
    plain generate's; percache takes it as the context. None for other RoPE types."""
    cfg = model.config.get_text_config(decoder=True)
    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None)
    if not isinstance(params, dict):
        return None
    nested = [v for v in params.values() if isinstance(v, dict)]  # one set per layer type
    limits = [p.get("original_max_position_embeddings") for p in (nested or [params])
              if p.get("rope_type", p.get("type")) == "longrope"]
    return min((n for n in limits if isinstance(n, int) and n > 0), default=None)


def context_note(model: Any) -> str:
    """Why the context :func:`context_limit` gives is shorter than the config's ("" if it is
    not): a longrope model is limited to its original context."""
    limit = longrope_limit(model)
    if limit is None:
        return ""
    return (f" (longrope: past original_max_position_embeddings={limit} the model rotates every "
            "position with its long factors, so K/V computed for a shorter prompt would not be "
            "plain generate's; percache serves only the original context)")


def dtype_device(model: Any) -> tuple[torch.dtype, torch.device]:
    """The dtype and device of the model's parameters."""
    p = next(model.parameters())
    return p.dtype, p.device


def greedy_reason(model: Any, kwargs: dict[str, Any]) -> str:
    """Why a ``generate`` call with ``kwargs`` is not plain greedy decoding ("" when it is)."""
    cfg = kwargs.get("generation_config") or model.generation_config
    if kwargs.get("do_sample", cfg.do_sample):
        return "sampling"
    if kwargs.get("num_beams", cfg.num_beams) not in (None, 1):
        return "beam search"
    for name in ("assistant_model", "prompt_lookup_num_tokens", "custom_generate", "penalty_alpha"):
        if kwargs.get(name) is not None:
            return name
    if kwargs.get("num_return_sequences", cfg.num_return_sequences) not in (None, 1):
        return "num_return_sequences"
    return ""


def _setting(model: Any, kwargs: dict[str, Any], name: str) -> Any:
    """Generation setting ``name`` of a call with ``kwargs``: the call's, else its config's."""
    return kwargs.get(name, getattr(kwargs.get("generation_config") or model.generation_config, name, None))


def _own_stop_strings(model: Any, tokenizer: Any, kwargs: dict[str, Any],
                      criteria: StoppingCriteriaList) -> dict[str, Any]:
    """``kwargs`` for a drafted ``generate``, its stop strings (the call's or the generation
    config's) turned into a criterion in ``criteria``: ``generate`` hands a callable
    ``custom_generate`` no tokenizer, so its own stop-string check would refuse to run."""
    stops = _setting(model, kwargs, "stop_strings")
    if not stops:
        return kwargs
    criteria.append(StopStringCriteria(kwargs.get("tokenizer") or tokenizer, stops))
    return {**{k: v for k, v in kwargs.items() if k != "tokenizer"}, "stop_strings": None}


# Arguments of model.generate that percache passes itself (the ids and cache it built, the
# outputs a Generation is made of): a caller's value used to end in "got multiple values".
_OWN_ARGUMENTS = ("input_ids", "attention_mask", *CACHE_ARGS, "return_dict_in_generate",
                  "output_logits", "pad_token_id")


def run_generate(model: Any, tokenizer: Any, prompt: Prompt, cache: Any, served: int,
                 stats: GenerationStats, kwargs: dict[str, Any], t0: float,
                 preempt: threading.Event | None, deadline: float | None = None,
                 drafting: DraftedDecoding | None = None) -> Generation:
    """Generate from ``prompt`` over ``cache`` (which serves its first ``served`` positions);
    with ``preempt``, stop after the token during which it was set, with ``deadline``, after
    the token during which it passed (``stats.fallback == "preempted"`` either way).

    With ``drafting`` (greedy decoding only, see :func:`greedy_reason`) the decoding loop is
    :class:`~percache_plugin.decode.verify.DraftedDecoding`: the same tokens, fewer forwards."""
    for name in _OWN_ARGUMENTS:
        if name in kwargs:
            raise ValueError(
                f"{name} cannot be passed: percache gives model.generate its own (the prompt's ids "
                "and the cache it built; the result is a Generation with token_ids and first_logits)")
    for name in ("num_beams", "num_return_sequences"):
        value = _setting(model, kwargs, name)
        if value is not None and value != 1:  # the reused cache is a batch of one
            raise ValueError(f"{name}={value} cannot be honoured: percache generates one sequence "
                             "over a batch-of-one cache")
    if kwargs.get("token_type_ids") is not None:
        # Stored and recycled K/V was computed without token types (GPT-2 adds their embedding
        # at every position): reusing it for such a call would silently change the output.
        raise ValueError("token_type_ids cannot be honoured: percache reuses K/V computed without "
                         "token types; call model.generate directly for such prompts")
    if _setting(model, kwargs, "token_healing"):
        # Healing rewrites the prompt's last tokens inside generate(), after their K/V was
        # computed or reused here: the cache would no longer match the ids.
        raise ValueError("token_healing cannot be honoured: it rewrites the prompt's last tokens after "
                         "percache computed their K/V; call model.generate directly for such prompts")
    device = dtype_device(model)[1]
    stats.tokens_computed = prompt.n_tokens - served
    ids = torch.tensor([prompt.input_ids], device=device)
    clock = _FirstTokenClock()
    processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
    processors.append(clock)
    criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
    check = _PreemptCheck(preempt, deadline) if preempt is not None or deadline is not None else None
    if check is not None:
        criteria.append(check)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id
    if _setting(model, kwargs, "stop_strings") and kwargs.get("tokenizer") is None:
        kwargs = {**kwargs, "tokenizer": tokenizer}  # the handle knows the model's tokenizer
    if drafting is not None:
        drafting.streamer = kwargs.get("streamer")
        kwargs = {**_own_stop_strings(model, tokenizer, kwargs, criteria), "custom_generate": drafting}
    if kwargs.get("use_cache", True) is False:
        raise ValueError("use_cache=False cannot be honoured: percache generates over its own K/V cache")
    # Explicit: generate() otherwise takes use_cache from the model's config (False on MPT) and
    # then feeds the whole sequence at every step on top of the cache it was given.
    kwargs = {**kwargs, "use_cache": True}
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), **cache_kw(cache),
            logits_processor=processors, stopping_criteria=criteria, return_dict_in_generate=True,
            output_logits=True, pad_token_id=pad, **kwargs,
        )
    new = out.sequences[0, prompt.n_tokens:].tolist()
    stats.new_tokens = len(new)
    stats.first_forward_tokens = min(1, len(new))
    if drafting is not None:
        c = drafting.counts
        stats.drafting = "on"
        stats.tokens_drafted, stats.tokens_accepted = c.drafted, c.accepted
        stats.decode_forwards = c.forwards
        stats.first_forward_tokens = c.first_tokens
        stats.forwards_saved = len(new) - c.forwards
        stats.drafts_declined = c.declined
        stats.packed_linear_calls = c.packed_calls
        stats.folded_attention_calls = c.folded_calls
        stats.draft_near_ties = c.near_ties
        stats.draft_tree_forwards = c.tree_forwards
        stats.drafted_by_source = dict(c.drafted_by_source)
        stats.accepted_by_source = dict(c.accepted_by_source)
    if check is not None and check.fired:
        stats.fallback = "preempted"
    stats.ttft_s = (clock.t or time.perf_counter()) - t0
    stats.total_s = time.perf_counter() - t0
    text = tokenizer.decode(new, skip_special_tokens=True)
    first = out.logits[0][0].detach().float().cpu() if out.logits else None
    return Generation(text, new, prompt.input_ids, stats, first)
