"""Tiny random causal LMs for tests, built from configs (no download, a few ms each).

Every family keeps the feature that makes it interesting for K/V reuse at toy size:
sliding windows small enough to matter in a 30-token prompt, partial rotary, per-layer-type
RoPE theta, q/k norms, softcapping, grouped-query attention.

    from tests.models import TINY_FAMILIES, tiny_model
    model = tiny_model("mistral")                                   # fp32, seed 0, eval mode
    model = tiny_model("llama", rope_parameters={"rope_type": "linear", "factor": 2.0})
    model = tiny_model("gemma2", dtype=torch.bfloat16, num_hidden_layers=4)

``rope_parameters`` is the transformers 5 name of the RoPE settings (``rope_theta``,
``rope_type`` and the type's own keys); the old ``rope_scaling`` keyword is still accepted
by transformers and is passed through unchanged. A ``rope_parameters`` override without
``rope_theta`` gets the family's default theta.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

__all__ = [
    "EXTRA_FAMILIES",
    "MASK_FAMILIES",
    "TINY_FAMILIES",
    "TINY_INIT_RANGE",
    "TINY_VOCAB",
    "tiny_config_kwargs",
    "tiny_model",
]

TINY_VOCAB: int = 256

TINY_INIT_RANGE: float = 0.2
"""Default ``initializer_range`` (std of the random weights) of every tiny model.

Measured on 5 prompts of the engine tests' shape (``tests/helpers.SEGMENTS`` with other chunks
and questions), 8 greedy tokens each: with the transformers default 0.02, 8 of the 13 families
gave at most 2 distinct continuations (llama and smollm3: one), and the top-2 logit margin fell
to 3e-5 (gpt_neox, gpt2); 0.1 still left gemma2 with one; 0.2 is the smallest tried that gives
every family at least 2 (12 of 13 families: 4 or 5; mistral: 2, its 8-token sliding window over
3 layers only sees the prompts' shared tail) with a smallest margin of 2e-4 (cohere2, 1e-3 or
more elsewhere), far above the fp32 reuse error. ``tests/test_models.py`` keeps this true."""

TINY_FAMILIES: tuple[str, ...] = (
    "llama",
    "qwen2",
    "qwen3",
    "mistral",
    "gemma2",
    "gemma3",
    "phi3",
    "gpt_neox",
    "gpt2",
)
"""The families every K/V-reuse feature is tested on."""

EXTRA_FAMILIES: tuple[str, ...] = ("cohere", "glm", "cohere2", "smollm3")
"""Families for RoPE-layout tests only: interleaved pairs ``(2i, 2i+1)`` (Cohere, GLM with
partial rotary) and layers without RoPE (Cohere2 full-attention layers, SmolLM3 NoPE layers)."""

MASK_FAMILIES: tuple[str, ...] = ("llama4",)
"""Families for attention-mask tests: chunked attention (Llama 4 text, every layer
``chunked_attention`` with chunks of 8 positions, so a 30-token prompt spans several)."""

_COMMON: Mapping[str, Any] = MappingProxyType(
    {
        "vocab_size": TINY_VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
)

# family -> (model_type for AutoConfig, family-specific config kwargs). GQA (2 kv heads for 4 heads)
# wherever the family has `num_key_value_heads`.
_GQA: Mapping[str, Any] = MappingProxyType({"num_key_value_heads": 2})
_FAMILIES: Mapping[str, tuple[str, Mapping[str, Any]]] = MappingProxyType(
    {
        "llama": ("llama", {**_GQA}),
        "qwen2": ("qwen2", {**_GQA}),
        # Qwen3 always has q_norm / k_norm (RMSNorm over head_dim).
        "qwen3": ("qwen3", {**_GQA, "head_dim": 16}),
        "mistral": ("mistral", {**_GQA, "sliding_window": 8}),
        # Alternating sliding/full layers (the config's default pattern), attention logit softcapping.
        "gemma2": (
            "gemma2",
            {
                **_GQA,
                "head_dim": 16,
                "query_pre_attn_scalar": 16,
                "sliding_window": 8,
                "attn_logit_softcapping": 50.0,
                "final_logit_softcapping": 30.0,
                "num_hidden_layers": 4,
            },
        ),
        # Text-only Gemma3: sliding (local theta 10k) and full (global theta 1M) layers, q/k norm.
        "gemma3": (
            "gemma3_text",
            {
                **_GQA,
                "head_dim": 16,
                "query_pre_attn_scalar": 16,
                "sliding_window": 8,
                "num_hidden_layers": 4,
                "layer_types": [
                    "sliding_attention",
                    "full_attention",
                    "sliding_attention",
                    "full_attention",
                ],
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                    "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                },
            },
        ),
        # Partial rotary: only the first half of each head's dims are rotated.
        "phi3": ("phi3", {**_GQA, "partial_rotary_factor": 0.5}),
        # GPT-NeoX has no GQA; `rotary_pct` is its name for the partial rotary factor.
        "gpt_neox": ("gpt_neox", {"rotary_pct": 0.25, "use_parallel_residual": True}),
        # Learned absolute positions: no RoPE at all.
        "gpt2": (
            "gpt2",
            {
                "n_embd": 64,
                "n_layer": 3,
                "n_head": 4,
                "n_positions": 1024,
                "resid_pdrop": 0.0,
                "embd_pdrop": 0.0,
                "attn_pdrop": 0.0,
            },
        ),
        # Chunked attention: a query sees only keys of its own 8-position chunk (no window kwarg).
        "llama4": (
            "llama4_text",
            {**_GQA, "head_dim": 16, "attention_chunk_size": 8, "num_local_experts": 2,
             "intermediate_size_mlp": 128},
        ),
        "cohere": ("cohere", {**_GQA, "use_qk_norm": False}),
        # Interleaved and partial (GLM's default partial_rotary_factor is 0.5).
        "glm": ("glm", {**_GQA, "head_dim": 16}),
        # Interleaved RoPE on sliding layers only; the full-attention layer has none.
        "cohere2": (
            "cohere2",
            {
                **_GQA,
                "sliding_window": 8,
                "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            },
        ),
        # no_rope_layers[i] == 1 means layer i applies RoPE.
        "smollm3": ("smollm3", {**_GQA, "no_rope_layers": [1, 0, 1]}),
    }
)
# GPT-2 names its sizes differently; these common keys would be unknown (or harmful) there.
_NOT_FOR_GPT2: frozenset[str] = frozenset(
    {
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "max_position_embeddings",
    }
)


def tiny_config_kwargs(family: str, **overrides: Any) -> tuple[str, dict[str, Any]]:
    """Return ``(model_type, config kwargs)`` for a tiny ``family`` with ``overrides`` applied.

    :raises KeyError: ``family`` is not in :data:`TINY_FAMILIES`, :data:`EXTRA_FAMILIES` or :data:`MASK_FAMILIES`.
    """
    if family not in _FAMILIES:
        known = ", ".join((*TINY_FAMILIES, *EXTRA_FAMILIES, *MASK_FAMILIES))
        raise KeyError(f"no tiny config for family {family!r}; known families: {known}")
    model_type, specific = _FAMILIES[family]
    common = {k: v for k, v in _COMMON.items() if not (family == "gpt2" and k in _NOT_FOR_GPT2)}
    # Deep-copy nested dicts (rope_parameters) so a config never aliases the table.
    init = {"initializer_range": TINY_INIT_RANGE}
    kwargs = _copy_nested({**common, **init, **specific, **overrides})
    if "num_hidden_layers" in overrides:
        # Let the config derive its per-layer patterns for the new depth.
        for key in ("layer_types", "no_rope_layers"):
            if key in specific and key not in overrides:
                kwargs.pop(key)
    return model_type, kwargs


def tiny_model(
    family: str,
    *,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    **overrides: Any,
) -> PreTrainedModel:
    """Build a tiny random ``AutoModelForCausalLM`` of ``family`` in eval mode.

    :param family: one of :data:`TINY_FAMILIES` (or :data:`EXTRA_FAMILIES`, :data:`MASK_FAMILIES`).
    :param dtype: parameter dtype of the returned model.
    :param seed: weights are drawn from ``torch.manual_seed(seed)``; same seed, same weights.
    :param overrides: config fields replacing the tiny defaults (e.g. ``rope_parameters``,
        ``num_hidden_layers``, ``sliding_window``).
    """
    model_type, kwargs = tiny_config_kwargs(family, **overrides)
    config = AutoConfig.for_model(model_type, **kwargs)
    with torch.random.fork_rng(devices=[]):  # seeded weights, caller's RNG state untouched
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def _copy_nested(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy_nested(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_nested(v) for v in value]
    return value
