"""Does the attention hook fire once per attention layer per forward? Checked at ``enable()``.

A model can accept the percache attention implementation and still not route each layer's
attention through it exactly once: differential attention (DiffLlama) calls the attention
function twice per layer, a recurrent-depth model (HRM) runs its layers several times per
forward, and GIT's text decoder never calls it. Splicing chunks at new positions relies on one
call per layer (the splice masks), so for a family the profile table does not know, the engine
runs one probe forward of four tokens; if the calls are not one per attention layer, it puts the
model back on its own attention and reports why (``capabilities.reasons["attention_hook"]``):
exact reuse still works through a plain cache, shifted reuse is not applicable. A probe forward
that fails outright (a family whose cache needs layers of its own kind, such as the indexer
caches of DeepSeek-V3.2-style sparse attention) refuses the model with
:class:`~percache_plugin.attention.kinds.UnsupportedModelError`, and so does a model whose
forward does not continue from a plain cache token by token (two new tokens over the cache of
four give other logits than one six-token forward, or raise: CPM-Ant, which prepends learned
prompt tokens and expects the whole sequence at every step), or whose attention is bidirectional
(a token's logits change when the tokens after it do: the causal-LM classes of BERT-style
encoders built with ``is_decoder=False``).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, cast

import torch
from torch import nn
from transformers import DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ..cache_arg import cache_kw
from .backend import AttentionSwitch, uninstall
from .kinds import UnsupportedModelError
from .profile import text_config

__all__ = ["HookProbe", "attention_layers", "eager_forward_of"]


def _check_continuation(model: nn.Module, ids: torch.Tensor, vocab: int) -> None:
    """Refuse a model whose forward does not continue from a plain per-token cache: two new
    tokens fed over the cache of the first four must give the logits of one six-token forward
    (positions passed explicitly where the forward takes them, as generate() does).
    CPM-Ant fails this: it prepends learned prompt tokens and expects the whole sequence at every
    step, so K/V served from chunks would be attended at the wrong places.

    :raises UnsupportedModelError: the continuation raises or its logits differ."""
    more = torch.tensor([[min(t, vocab - 1) for t in (17, 21)]], device=ids.device)
    full = torch.cat([ids, more], dim=1)
    name = type(model).__name__
    try:
        with torch.inference_mode():
            try:
                got, want = _continue_and_full(model, ids, full, positions=True)
            except TypeError as exc:
                if "position_ids" not in str(exc):
                    raise
                got, want = _continue_and_full(model, ids, full, positions=False)
            _check_causal(model, full, vocab)
    except UnsupportedModelError:
        raise
    except Exception as exc:
        raise UnsupportedModelError(
            f"percache cannot be enabled on {name}: a forward of new tokens over a plain per-token "
            f"K/V cache of the earlier ones fails ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:200]}); the model does not continue from cached K/V "
            "token by token") from exc
    # Loose on purpose: only a gross mismatch refuses (fp32 kernels on tiny XLM-RoBERTa-XL already
    # differ by 0.04 while exact reuse passes the conformance tolerance).
    if got.shape != want.shape or float((got - want).abs().max()) > 0.25 * (1 + float(want.abs().max())):
        diff = float((got - want).abs().max()) if got.shape == want.shape else float("nan")
        raise UnsupportedModelError(
            f"percache cannot be enabled on {name}: new tokens fed over a plain per-token K/V cache "
            f"give other logits than one forward of the whole sequence (max|dlogits|={diff:.3g}); "
            "the model does not continue from cached K/V token by token")


def _check_causal(model: nn.Module, full: torch.Tensor, vocab: int) -> None:
    """Refuse a model whose earlier tokens' logits change when only the last two tokens do:
    its attention looks ahead, so a prefix's K/V depends on what follows it. Same shapes in
    both forwards, so a causal model gives the same numbers (kernel rounding aside).

    :raises UnsupportedModelError: the earlier logits moved."""
    other = full.clone()
    other[0, -2:] = torch.tensor([min(t, vocab - 1) for t in (3, 11)], device=full.device)
    a, b = (model(input_ids=x).logits[0, :-2].float() for x in (full, other))
    diff = float((a - b).abs().max())
    if diff > 1e-4 * (1 + float(a.abs().max())):
        config = text_config(model)
        hint = (f"; its config has is_decoder=False: load it with is_decoder=True to use "
                f"{type(model).__name__} as a causal LM" if getattr(config, "is_decoder", None)
                is False else "")
        raise UnsupportedModelError(
            f"percache cannot be enabled on {type(model).__name__}: its attention is "
            f"bidirectional (logits of earlier tokens change when later tokens do, "
            f"max|dlogits|={diff:.3g}), so a prefix's K/V depends on what follows it{hint}")


def _continue_and_full(model: nn.Module, head: torch.Tensor, full: torch.Tensor,
                       positions: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of the last two tokens: fed over a cache of ``head``, and in one forward."""
    n, total = head.shape[1], full.shape[1]

    def pos(a: int, b: int) -> dict[str, Any]:
        return {"position_ids": torch.arange(a, b, device=full.device)[None]} if positions else {}

    cache = DynamicCache()
    model(input_ids=head, **cache_kw(cache), use_cache=True, **pos(0, n))
    got = model(input_ids=full[:, n:], **cache_kw(cache), use_cache=True, **pos(n, total))
    want = model(input_ids=full, **cache_kw(DynamicCache()), use_cache=True, **pos(0, total))
    return got.logits[0, -2:].float(), want.logits[0, -2:].float()


def eager_forward_of(module: nn.Module) -> Any:
    """The model family's own eager attention (it knows softcapping and its mask layout)."""
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        raise RuntimeError(f"{type(module).__name__} has no eager_attention_forward to fall back on")
    return fn


def attention_layers(model: nn.Module) -> list[int]:
    """Layer indices of the model's attention modules (all decoder layers if none say)."""
    found = {int(cast(Any, m).layer_idx) for m in model.modules()
             if "Attention" in type(m).__name__ and isinstance(getattr(m, "layer_idx", None), int)}
    return sorted(found) or list(range(int(text_config(model).num_hidden_layers)))


class HookProbe:
    """Counts attention calls during one probe forward (the engine's relay asks
    :attr:`recording` first and hands the call to :meth:`attend` while it is)."""

    def __init__(self) -> None:
        self._calls: list[int] | None = None
        self._backend = "sdpa"

    @property
    def recording(self) -> bool:
        return self._calls is not None

    def attend(self, module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, kwargs: dict[str, Any]) -> Any:
        """Record the call and run the backend's plain attention (the output is discarded)."""
        assert self._calls is not None
        self._calls.append(int(getattr(module, "layer_idx", -1)))
        fn = sdpa_attention_forward if self._backend == "sdpa" else eager_forward_of(module)
        return fn(module, query, key, value, attention_mask, **kwargs)

    def problem(self, model: nn.Module, backend: str) -> str:
        """Why the hook does not fire once per attention layer in a probe forward ("" if it does)."""
        vocab = int(cast(Any, model).get_input_embeddings().num_embeddings)
        device = next(model.parameters()).device
        ids = torch.tensor([[min(t, vocab - 1) for t in (1, 5, 9, 13)]], device=device)
        self._calls, self._backend = [], backend
        try:
            with torch.inference_mode():
                model(input_ids=ids, **cache_kw(DynamicCache()), use_cache=True)
            calls = self._calls
        except Exception as exc:
            raise UnsupportedModelError(
                f"percache cannot be enabled on {type(model).__name__}: a forward with a plain "
                f"per-token K/V cache (DynamicCache) fails ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]}); its cache needs layers of its own kind") from exc
        finally:
            self._calls = None
        self._calls = []  # the continuation forwards go through the hook too
        try:
            _check_continuation(model, ids, vocab)
        finally:
            self._calls = None
        expected = attention_layers(model)
        if backend == "off":
            return ""
        if not calls:
            return ("the attention hook never fired in a probe forward (the model accepted the "
                    "percache attention but does not call it)")
        if calls != expected:
            return (f"the attention hook fired for layers {calls[:16]}{'...' if len(calls) > 16 else ''} "
                    f"in one forward, not once for each of {expected} (attention called twice per "
                    "layer, or layers run several times): splice masks cannot apply")
        return ""

    def verify(self, model: nn.Module, switch: AttentionSwitch) -> AttentionSwitch:
        """``switch`` if the hook fires once per layer; else the model back on its own attention
        and an inactive switch saying why.

        :raises UnsupportedModelError: the probe forward fails (the model is left as found)."""
        try:
            reason = self.problem(model, switch.backend if switch.active else "off")
        except UnsupportedModelError:
            uninstall(model, switch)
            raise
        if not reason:
            return switch
        off = dataclasses.replace(switch, active=False, reason=reason)
        uninstall(model, switch)
        return off
