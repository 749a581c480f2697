"""Tiny random models of every causal-LM family transformers registers, for the capability matrix.

:func:`registered_families` lists the ``model_type`` keys of
``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``; :func:`build_family` builds a tiny random model of one
of them from its default config shrunk to toy size (2 layers, hidden 64, vocab 320; what a
family needs beyond the generic rules is data in :mod:`.overrides`), or raises
:class:`Unbuildable` with the reason it cannot (multimodal-only, remote code, a config that
refuses toy sizes, a model that does not run a plain text forward). Each family runs in its own
subprocess with a time bound (:mod:`.matrix` drives that), so one family that hangs or crashes
cannot take the others with it.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch

from .overrides import FAMILY_SKIPS, apply_overrides
from .tiny import TINY_VOCAB

__all__ = ["MAX_PARAMS", "TINY_SIZES", "Unbuildable", "build_family", "registered_families",
           "tiny_config"]

MAX_PARAMS = 20_000_000
"""A family whose shrunk model still has more parameters than this is skipped (its default
config holds sizes the shrinking does not reach, e.g. a full vision tower)."""

TINY_SIZES: Mapping[str, Any] = MappingProxyType({
    "vocab_size": TINY_VOCAB, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "max_position_embeddings": 8192, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 1,
    "decoder_start_token_id": 0,
    # the causal-LM classes of encoder families (BERT, RoBERTa, ...) attend both ways unless
    # is_decoder, as their docs say to set; percache refuses them bidirectional
    "is_decoder": True,
    # MoE, MLA, SSM and other family-specific sizes, set only where the config has the field
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "expert_hidden_size": 32,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 16, "ffn_dim": 128, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    "d_model": 64, "decoder_layers": 2, "encoder_layers": 2, "decoder_attention_heads": 4,
    "encoder_attention_heads": 4, "n_positions": 8192, "n_ctx": 8192,
    "mamba_d_state": 8, "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_headdim": 16,
    "state_size": 8, "ssm_state_size": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "sliding_window": 16,
    "attention_window": 16, "window_size": 16, "rotary_dim": 8, "rotary_emb_base": 10000,
})
"""Fields set on a family's default config, each only where the config already has it."""

_MUST_SET = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size", "max_position_embeddings", "pad_token_id", "bos_token_id",
             "eos_token_id")


class Unbuildable(Exception):
    """No tiny model of this family can be built here; :attr:`reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def registered_families() -> tuple[str, ...]:
    """Every ``model_type`` transformers maps to a causal-LM class, sorted."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return tuple(sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))


def _plain_attr(config: Any, name: str) -> Any:
    """``config.name``, or None where it is missing or varies per layer (Gemma4's ``head_dim``
    raises instead of answering)."""
    try:
        return getattr(config, name, None)
    except Exception:  # AmbiguousGlobalPerLayerAttributeError
        return None


def _sizes_for(config: Any) -> dict[str, Any]:
    """The :data:`TINY_SIZES` fields ``config`` has (directly or through its attribute map)."""
    known = set(config.to_dict()) | set(getattr(config, "attribute_map", {}) or {})
    sizes = {k: v for k, v in TINY_SIZES.items() if k in known or k in _MUST_SET}
    if sizes.get("sliding_window") is None and getattr(config, "sliding_window", None) is None:
        sizes.pop("sliding_window", None)  # keep "no sliding window" as the family has it
    if _plain_attr(config, "head_dim") is None and "head_dim" in sizes and "head_dim" not in known:
        sizes.pop("head_dim")
    if "kv_lora_rank" in sizes:  # MLA: every head has its own keys (one latent per token)
        sizes["num_key_value_heads"] = sizes["num_attention_heads"]
        if "head_dim" in sizes and "qk_rope_head_dim" in sizes:  # head_dim sizes the RoPE part
            sizes["head_dim"] = sizes["qk_rope_head_dim"]
    attention_types: Any = getattr(config, "attention_types", None)
    if _repeats(attention_types):  # GPT-Neo: [[kinds, repeats]] must add up to the layer count
        kinds = list(attention_types[0][0])
        sizes["attention_types"] = [[kinds, 1]]
        sizes["num_hidden_layers"] = len(kinds)
    layer_types = getattr(config, "layer_types", None)
    if isinstance(layer_types, list) and layer_types and _settable(config, "layer_types"):
        kinds = list(dict.fromkeys(layer_types))  # keep one layer of each kind, in order
        sizes["num_hidden_layers"] = max(2, len(kinds))
        # set the real field, not its alias: Zamba2 derives hybrid_layer_ids from it at init
        sizes[_field(config, "layer_types")] = (kinds * 2)[: sizes["num_hidden_layers"]]
    sparse = config.to_dict().get("per_layer_config")
    if isinstance(sparse, Mapping) and sparse:
        sizes["per_layer_config"] = _per_layer(config, sparse, sizes)
    return sizes


def _per_layer(config: Any, sparse: Mapping[Any, Mapping[str, Any]],
               sizes: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """A sparse ``per_layer_config`` (keyed by the default's layer indices: Gemma 4's wider
    full-attention heads, dots3's MLA layers) moved onto the shrunk layers: each shrunk layer
    takes the overrides of the first default layer of its type, each size scaled by the same
    ratio to the global value as in the default (Gemma 4: head_dim 512 of 256 -> 32 of 16)."""
    by_index = {int(k): dict(v) for k, v in sparse.items()}
    defaults: list[Any] = list(getattr(config, "layer_types", None) or [])
    shrunk = list(sizes.get(_field(config, "layer_types")) or defaults[: sizes["num_hidden_layers"]])
    full = config.to_dict()
    out: dict[int, dict[str, Any]] = {}
    for i, kind in enumerate(shrunk):
        source = next((j for j, k in enumerate(defaults) if k == kind), i) if defaults else i
        overrides = by_index.get(source)
        if overrides:
            out[i] = {k: _scaled(v, full.get(k), sizes.get(k)) for k, v in overrides.items()}
    return out


def _scaled(value: Any, default: Any, tiny: Any) -> Any:
    if all(isinstance(x, int) and not isinstance(x, bool) and x > 0
           for x in (value, default, tiny)):
        return max(1, tiny * value // default)
    return value


def _field(config: Any, name: str) -> str:
    """The field ``name`` stands for through the config's attribute map."""
    return str((getattr(config, "attribute_map", {}) or {}).get(name, name))


def _settable(config: Any, name: str) -> bool:
    """Whether ``name`` (through the config's attribute map) is a field, not a derived
    read-only property (Bamba, Falcon-H1 and Mamba-2 derive their layer types)."""
    prop = getattr(type(config), _field(config, name), None)
    return not (isinstance(prop, property) and prop.fset is None)


def _repeats(value: Any) -> bool:
    """Whether ``value`` is a GPT-Neo style ``[[kinds, repeats], ...]`` list."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], (list, tuple)) \
        and len(value[0]) == 2 and isinstance(value[0][0], (list, tuple)) and bool(value[0][0])


def tiny_config(model_type: str) -> Any:
    """The family's default config shrunk to toy size (composite configs: the text config).

    :raises Unbuildable: the config class cannot be instantiated, or rejects the toy sizes.
    """
    from transformers import AutoConfig

    if model_type in FAMILY_SKIPS:
        raise Unbuildable(FAMILY_SKIPS[model_type])
    try:
        default = AutoConfig.for_model(model_type)
    except Exception as exc:  # some configs need arguments or remote code
        raise Unbuildable(f"default config: {type(exc).__name__}: {_short(exc)}") from exc
    kwargs = _sizes_for(default)
    subs = dict(getattr(type(default), "sub_configs", {}) or {})
    for name in subs:
        sub = getattr(default, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            kwargs[name] = {**sub.to_dict(), **_sizes_for(sub)}
    kwargs = apply_overrides(model_type, kwargs)
    try:  # configs deriving layer_types themselves (read-only property) are not given one (_settable)
        return AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:
        raise Unbuildable(f"toy config rejected: {type(exc).__name__}: {_short(exc)}") from exc


def build_family(model_type: str, *, seed: int = 0) -> Any:
    """A tiny random fp32 causal LM of ``model_type`` in eval mode that runs a text forward.

    :raises Unbuildable: why not (the message is the matrix's reason).
    """
    from transformers import AutoModelForCausalLM

    config = tiny_config(model_type)
    try:
        with torch.random.fork_rng(devices=[]), contextlib.redirect_stderr(io.StringIO()):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    except Exception as exc:
        raise Unbuildable(f"from_config: {type(exc).__name__}: {_short(exc)}") from exc
    n = sum(p.numel() for p in model.parameters())
    if n > MAX_PARAMS:
        raise Unbuildable(f"{n / 1e6:.0f}M parameters at toy text sizes (a part the shrinking "
                          "does not reach, e.g. a vision or audio tower)")
    model.eval()
    try:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([[0, 10, 20, 30]]))
    except Exception as exc:
        raise Unbuildable(f"no plain text forward: {type(exc).__name__}: {_short(exc)}") from exc
    logits = getattr(out, "logits", None)
    if not isinstance(logits, torch.Tensor) or logits.shape[-1] < TINY_VOCAB:
        raise Unbuildable("the forward returns no next-token logits over the vocabulary")
    return model


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
