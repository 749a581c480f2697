"""Models chunk K/V reuse does not apply to, and why: ``enable()`` refuses such a model with
:class:`UnsupportedModelError` naming the reason (it would otherwise fail at request time), and
the conformance suite reports every check of it as not applicable with the same reason.

Three kinds are recognised from the model itself: a forward that takes no cache argument
(state-space and recurrent models such as Mamba and RWKV, and old architectures without a
K/V cache); hybrid models whose cache holds a recurrent state for some layers (linear
attention, Mamba or convolution layers beside attention layers, named in the config's
``layer_types``), where a prefix's state cannot be assembled from per-chunk K/V; and models
transformers itself marks stateful (``_is_stateful``: a cache that cannot be cropped or rolled
back, such as Falcon-H1's parallel Mamba heads or DeepSeek-V4's compressed cache). A fourth kind
has per-token K/V but not causal attention: ``use_bidirectional_attention`` (Gemma's configs,
True or "all"; "vision" keeps text causal) lets every token attend to later ones, so a prefix's
K/V depends on what follows it.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..cache_arg import CACHE_ARGS

__all__ = ["RECURRENT_MARKERS", "UnsupportedModelError", "check_reusable", "reuse_limitation"]

RECURRENT_MARKERS = ("linear", "mamba", "conv", "recurrent", "ssm", "rwkv", "deltanet", "gated")
"""Substrings of a ``layer_types`` entry (or a cache layer's class name) that mean the layer
keeps a recurrent state rather than per-token keys and values."""


def _forward_params(model: Any) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _unwrapped(model: Any) -> Any:
    """The transformers model inside a wrapper that forwards its keyword arguments (a peft
    ``PeftModel`` passes the cache through ``**kwargs``)."""
    base = getattr(model, "get_base_model", None)
    return base() if callable(base) else model


def reuse_limitation(model: Any) -> str:
    """Why chunk K/V reuse does not apply to ``model`` ("" when it may)."""
    name = type(model).__name__
    model = _unwrapped(model)
    if not _forward_params(model) & set(CACHE_ARGS):
        return (f"{name}.forward takes no cache ({' or '.join(CACHE_ARGS)}: a recurrent state or no K/V cache): "
                "chunk K/V reuse does not apply")
    config = model.config.get_text_config(decoder=True)
    kinds = {str(t) for t in (getattr(config, "layer_types", None) or ())}
    for attr in ("layers_block_type", "block_types"):
        kinds |= {str(t) for t in (getattr(config, attr, None) or ())}
    recurrent = sorted(k for k in kinds if any(m in k.lower() for m in RECURRENT_MARKERS))
    if recurrent:
        return (f"hybrid model: layers of type {', '.join(recurrent)} keep a recurrent state, "
                "not per-token K/V; a prefix's state cannot be assembled from chunk K/V")
    bidirectional = getattr(config, "use_bidirectional_attention", None)
    if bidirectional is True or bidirectional == "all":
        return (f"bidirectional attention (use_bidirectional_attention={bidirectional!r}): every "
                "token attends to later ones too, so a prefix's K/V depends on what follows it "
                "and chunk K/V cannot be reused")
    if getattr(type(model), "_is_stateful", False):
        return (f"{name} keeps a state in its cache that is not per-token K/V (transformers marks "
                "it stateful: the cache cannot be cropped or rolled back); a prefix's state "
                "cannot be assembled from chunk K/V")
    return ""


class UnsupportedModelError(TypeError):
    """The model keeps non-attention state, or its attention is not causal, so chunk K/V reuse
    cannot apply; the message says why."""


def check_reusable(model: Any) -> None:
    """Raise :class:`UnsupportedModelError` when chunk K/V reuse does not apply to ``model``."""
    reason = reuse_limitation(model)
    if reason:
        raise UnsupportedModelError(
            f"percache cannot be enabled on {type(model).__name__}: {reason}. Recurrent, "
            "hybrid and bidirectional models are not supported (docs/capability-matrix.md lists "
            "them); use the model without percache.")
