"""Per-family config overrides for the capability matrix's tiny models, as data.

:func:`.families.tiny_config` shrinks every family's default config with one generic rule set
(:data:`.families.TINY_SIZES`); the families below need a few more fields to hold together at
toy size (a head count that must divide a shrunk width, a per-layer table keyed by the default
layer count, a field whose default is None). Each entry is merged into the shrunk kwargs last;
a nested mapping is merged into the sub-config of that name (``text_config``), and
:data:`DROP` removes a field so the config's own default or derivation applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["DROP", "FAMILY_OVERRIDES", "FAMILY_SKIPS", "apply_overrides"]

DROP = "<drop>"
"""An override value that removes the field from the kwargs instead of setting it."""

# Mamba-2 mixers: heads * head width must equal expand (2) * hidden (64) = 128.
_MAMBA2: Mapping[str, Any] = {"mamba_n_heads": 8, "mamba_d_head": 16}

# Gemma 4 / 3n: a per-layer embedding table (vocabulary x layers x width) beside the main one.
_PER_LAYER_INPUT: Mapping[str, Any] = {"vocab_size_per_layer_input": 320,
                                       "hidden_size_per_layer_input": 16}
# Gemma 3n at 4 layers: the last 2 reuse the K/V of the first 2 (KV sharing), per-layer widths.
_GEMMA3N: Mapping[str, Any] = {
    **_PER_LAYER_INPUT, "num_hidden_layers": 4, "num_kv_shared_layers": 2, "laurel_rank": 8,
    "layer_types": ["sliding_attention", "full_attention"] * 2, "intermediate_size": [128] * 4,
    "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0],
}

# dots3: its sliding layers' MLA sizes come from swa_* fields (per_layer_config is rebuilt from
# them), with head_dim = nope + rope head dims.
_DOTS3: Mapping[str, Any] = {
    "per_layer_config": DROP, "mlp_layer_types": DROP, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 4,
    "swa_q_lora_rank": 16, "swa_kv_lora_rank": 16, "swa_head_dim": 16,
    "swa_qk_nope_head_dim": 8, "swa_v_head_dim": 16, "index_head_dim": 16,
}

# Qwen4-Exp's indexed (QSA) attention: its sizes default to None, the released model sets them.
_QSA: Mapping[str, Any] = {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16,
                           "indexer_budget": 8, "indexer_compress_ratio": 4}

FAMILY_OVERRIDES: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "bamba": {**_MAMBA2, "attn_layer_indices": [1]},
    "falcon_h1": {**_MAMBA2, "mamba_d_ssm": 128},
    # defaults are all Mamba layers; the released checkpoints mix in attention layers
    "granitemoehybrid": {**_MAMBA2, "layer_types": ["linear_attention", "full_attention"]},
    "gemma4": {"text_config": _PER_LAYER_INPUT},
    "gemma4_text": _PER_LAYER_INPUT,
    "gemma3n": {"text_config": _GEMMA3N},
    "gemma3n_text": _GEMMA3N,
    "dots3_note": {"text_config": _DOTS3, "vision_config": {"adapter_in_dim": 64, "adapter_out_dim": 64},
                   "audio_config": {"adapter_input_size": 64, "adapter_out_dim": 64}},
    "dots3_note_text": _DOTS3,
    # the attention reads attn_config.rope_theta and clips q/k/v by clip_qkv (None fails): released
    # configs carry both
    "dbrx": {"attn_config": {"rope_theta": 500_000.0, "clip_qkv": 8.0, "kv_n_heads": 2},
             "ffn_config": {"ffn_hidden_size": 128}},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "qwen4_exp": {"text_config": _QSA},
    "qwen4_exp_text": _QSA,
    # the shared transformer block is tied across hybrid layers: it needs two of them
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
    # axial position embeddings: dims add up to hidden, shape multiplies to the max positions
    "reformer": {"is_decoder": True, "axial_pos_embds_dim": [16, 48], "axial_pos_shape": [64, 128],
                 "attn_layers": ["local", "lsh"]},
    # relative positions: no length limit to set
    "xlnet": {"max_position_embeddings": DROP, "d_head": 16},
    "prophetnet": {"num_hidden_layers": DROP, "num_encoder_layers": 2, "num_decoder_layers": 2},
    "xmod": {"default_language": "en_XX"},
    # default rope_parameters are empty; Cohere's released layout: RoPE on sliding layers only
    "cohere_compass_text": {
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 50_000.0},
                            "full_attention": None},
    },
    "zaya": {"num_experts_per_tok": 1},
    "xlm": {"causal": True},  # XLM's flag for a causal (language-model) attention mask
    # 6 hash tables of 500,002 rows by default; the local models read the global width
    "blt": {"encoder_hash_byte_group_vocab": 1024, "encoder_config": {"hidden_size_global": 64},
            "decoder_config": {"hidden_size_global": 64}},
    # the native recurrent kernel rejects its own state at qk_dim_factor 0.5 (the default)
    "xlstm": {"qk_dim_factor": 1.0},
    "jamba": {"attn_layer_offset": 1, "attn_layer_period": 2, "expert_layer_offset": 1,
              "expert_layer_period": 2},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    "mamba2": {"num_heads": 8, "head_dim": 16, "n_groups": 1},
})
"""``model_type`` -> fields set on its shrunk config (see the module docstring)."""


_DRAFTER = ("a Gemma 4 assistant (drafter): every layer reads the K/V its target model shares "
            "(num_kv_shared_layers = num_hidden_layers), so it has no forward of its own to test")
_AUDIO_CODES = ("the causal-LM class is the audio-code decoder of a text-to-music model: it takes "
                "the decoder's own config (not the registered composite one) and codebook ids, "
                "not text")

FAMILY_SKIPS: Mapping[str, str] = MappingProxyType({
    "gemma4_assistant": _DRAFTER,
    "gemma4_unified_assistant": _DRAFTER,
    "musicgen": _AUDIO_CODES,
    "musicgen_melody": _AUDIO_CODES,
})
"""``model_type`` -> why no tiny model of it is built (the matrix row's reason)."""


def apply_overrides(model_type: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the family's :data:`FAMILY_OVERRIDES` merged in (a new dict)."""
    return _merge(kwargs, FAMILY_OVERRIDES.get(model_type, {}))


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if value == DROP:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
