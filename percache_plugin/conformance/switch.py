"""Checks of the attention switch: it takes effect, the hook fires once per layer per forward,
``disable()`` restores the model bit for bit, and left-padded batches see the right mask."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

from ..attention.backend import PREFIX
from ..attention.hf_private import attn_implementation
from ..attention.hf_private import check as check_private
from ..attention.hook_probe import attention_layers
from ..cache_arg import cache_kw
from ..hooks.specs import hookimpl
from .result import Outcome, failed, not_applicable, passed
from .subject import CHUNKS, QUERIES, SYSTEM, Subject, logits_tolerance, open_handle

__all__ = ["check_attention_switch", "check_disable_restores", "check_left_padding", "attention_layers"]


class _LayerCounter:
    """Records ``module.layer_idx`` of every ``percache_attention`` call."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    @hookimpl(wrapper=True)
    def percache_attention(self, ctx: Any, module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                           value: torch.Tensor, attention_mask: torch.Tensor | None,
                           kwargs: dict[str, Any]) -> Any:
        self.calls.append(int(getattr(module, "layer_idx", -1)))
        return (yield)


def _ids(subject: Subject, text: str) -> torch.Tensor:
    ids = list(subject.tokenizer(text)["input_ids"])
    if not ids:
        raise ValueError(f"the tokenizer turned {text!r} into no tokens")
    return torch.tensor([ids], device=subject.device)


def check_attention_switch(subject: Subject) -> Outcome:
    """The private transformers attributes percache reads still exist, the model routes
    attention through percache, and the hook fires once per attention layer per forward (a
    prefill and one decoding step)."""
    model = subject.model
    problems = check_private(model)
    if problems:  # transformers changed an attribute percache reads (attention/hf_private.py)
        return failed("transformers changed what percache relies on: " + "; ".join(problems))
    with open_handle(subject) as pc:
        caps = pc.capabilities
        if not caps.attention_hook:
            idle = pc.engine.idle_attention_plugins()
            return not_applicable(
                f"attention is not interface-based ({caps.reasons.get('attention_hook', '?')}); "
                "exact reuse still works through a plain cache"
                + (f"; never called here: percache_attention of {', '.join(idle)}" if idle else ""))
        impl = attn_implementation(model)
        if not impl.startswith(PREFIX):
            return failed(f"the switch reported success but the model uses {impl!r}")
        counter = _LayerCounter()
        pc.plugins.register(counter)
        expected = attention_layers(model)
        ids = _ids(subject, SYSTEM)
        cache = DynamicCache()
        per_forward = []
        with torch.inference_mode():
            for step in (ids, ids[:, -1:]):
                counter.calls.clear()
                model(input_ids=step, **cache_kw(cache), use_cache=True)
                per_forward.append(list(counter.calls))
    figure = f"{len(per_forward[0])} calls/forward, {len(expected)} attention layers"
    for i, calls in enumerate(per_forward):
        if calls != expected:
            what = "prefill" if i == 0 else "decoding step"
            return failed(f"{what}: hook fired for layers {calls}, expected each of {expected} once",
                          figure, float(len(calls)), calls=per_forward, expected=expected)
    return passed(figure, float(len(expected)), f"backend {caps.attention_backend}",
                  backend=caps.attention_backend, implementation=impl)


def _logits(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None = None,
            positions: torch.Tensor | None = None) -> torch.Tensor:
    kwargs: dict[str, Any] = {"input_ids": ids, "use_cache": False,
                              "attention_mask": torch.ones_like(ids) if mask is None else mask}
    if positions is not None:
        kwargs["position_ids"] = positions
    with torch.inference_mode():
        return model(**kwargs).logits.float()


def check_disable_restores(subject: Subject) -> Outcome:
    """Outputs after ``disable()`` are bit-identical to before ``enable()``; while enabled, a
    plain forward agrees with the model's own attention within tolerance."""
    model = subject.model
    ids = _ids(subject, SYSTEM + " " + CHUNKS[0])
    before = _logits(model, ids)
    with open_handle(subject):
        during = _logits(model, ids)
    after = _logits(model, ids)
    restored = float((after - before).abs().max())
    enabled = float((during - before).abs().max())
    tol = logits_tolerance(subject.dtype, before)
    figure = f"after disable max|dlogits|={restored:.3g}; enabled {enabled:.3g}"
    if not torch.equal(before, after):
        return failed(f"after disable() the logits differ from before enable() by {restored:.3g}: "
                      "the model was not restored", figure, restored)
    if not enabled <= tol:
        return failed(f"with percache enabled a forward differs from the model's own attention by "
                      f"{enabled:.3g} (tolerance {tol:.3g})", figure, enabled)
    return passed(figure, restored, "bit-identical after disable()", enabled_diff=enabled)


def _left_padded(subject: Subject, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [list(subject.tokenizer(t)["input_ids"]) for t in texts]
    tok = subject.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    pad = 0 if pad is None else int(pad)
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=subject.device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows],
                        device=subject.device)
    return ids, mask


def check_left_padding(subject: Subject) -> Outcome:
    """A left-padded batch of two prompts of different lengths: the logits of the real tokens
    are the same with percache enabled as with the model's own attention."""
    model = subject.model
    ids, mask = _left_padded(subject, [QUERIES[0], SYSTEM + " " + QUERIES[1]])
    pads = int((mask == 0).sum())
    if pads == 0:
        return failed("the two test prompts tokenized to the same length; nothing was padded")
    accepts_positions = "position_ids" in inspect.signature(model.forward).parameters
    positions = (mask.cumsum(-1) - 1).clamp(min=0) if accepts_positions else None
    want = _logits(model, ids, mask, positions)
    with open_handle(subject):
        got = _logits(model, ids, mask, positions)
    real = mask.bool()
    diff = float((got[real] - want[real]).abs().max())
    tol = logits_tolerance(subject.dtype, want[real])
    figure = f"max|dlogits|={diff:.3g} over {int(real.sum())} real tokens ({pads} pads)"
    if not diff <= tol:
        return failed(f"left-padded batch: logits of real tokens differ by {diff:.3g} with percache "
                      f"enabled (tolerance {tol:.3g}); is the attention mask lost?", figure, diff)
    return passed(figure, diff)
