"""enable() refuses recurrent and hybrid models (non-attention state in the cache) with an
error naming the reason, instead of failing at request time; attention models still enable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from transformers import (
    AutoModelForCausalLM,
    FalconH1Config,
    JambaConfig,
    Lfm2Config,
    MambaConfig,
    Qwen3NextConfig,
    RwkvConfig,
)

import percache_plugin as percache
from percache_plugin.attention.kinds import reuse_limitation
from percache_plugin.conformance.tiny import byte_tokenizer
from tests.helpers import tiny_pair

SIZES: dict[str, Any] = {"vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 2}
ATTN: dict[str, Any] = {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}

CASES: dict[str, tuple[Callable[[], Any], str]] = {
    # transformers 5.24 renamed Mamba's cache_params to cache and gave it linear_attention layer types
    "mamba": (lambda: MambaConfig(**SIZES, state_size=8), "takes no cache|recurrent state"),
    "rwkv": (lambda: RwkvConfig(**SIZES, attention_hidden_size=64, intermediate_size=128),
             "takes no cache"),
    "jamba": (lambda: JambaConfig(**SIZES, **ATTN, attn_layer_period=2, attn_layer_offset=1,
                                  num_experts=2, expert_layer_period=2, mamba_d_state=8),
              "layers of type .*mamba"),
    "qwen3_next": (lambda: Qwen3NextConfig(**SIZES, **ATTN, head_dim=16, linear_num_value_heads=2,
                                           linear_num_key_heads=2, linear_key_head_dim=16,
                                           linear_value_head_dim=16, num_experts=2,
                                           moe_intermediate_size=32,
                                           shared_expert_intermediate_size=32,
                                           layer_types=["linear_attention", "full_attention"]),
                   "layers of type linear_attention"),
    "lfm2 (conv layers)": (lambda: Lfm2Config(**SIZES, **ATTN, full_attn_idxs=[1]),
                           "layers of type conv"),
    "falcon_h1 (stateful only)": (
        lambda: FalconH1Config(**SIZES, **ATTN, head_dim=16, mamba_d_ssm=128, mamba_n_heads=8,
                               mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1,
                               mamba_chunk_size=16),
        "transformers marks it stateful"),
}


@pytest.mark.parametrize("family", sorted(CASES))
def test_recurrent_and_hybrid_models_are_refused_at_enable(family: str) -> None:
    make_config, reason = CASES[family]
    model = AutoModelForCausalLM.from_config(make_config())
    assert reuse_limitation(model)  # the conformance suite reports the same reason
    with pytest.raises(percache.UnsupportedModelError, match=reason) as info:
        percache.enable(model, byte_tokenizer())
    assert type(model).__name__ in str(info.value)
    # Nothing was switched: the model still runs as transformers built it.
    assert model.config._attn_implementation != "percache"


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_bidirectional_attention_is_refused(family: str) -> None:
    # Served before: warm requests 0.04-0.2 off plain generate's first-token logits, other tokens.
    model, tok = tiny_pair(family, use_bidirectional_attention=True)
    assert "bidirectional attention" in reuse_limitation(model)
    with pytest.raises(percache.UnsupportedModelError, match="later ones"):
        percache.enable(model, tok)
    causal, _ = tiny_pair(family, use_bidirectional_attention=False)
    assert reuse_limitation(causal) == ""


def test_attention_models_still_enable() -> None:
    model, tok = tiny_pair("llama")
    assert reuse_limitation(model) == ""
    pc = percache.enable(model, tok)
    assert pc.capabilities.exact_reuse
    pc.close()


@pytest.mark.parametrize("task_type", [None, "CAUSAL_LM"])
def test_a_peft_wrapped_attention_model_still_enables(task_type: str | None) -> None:
    peft = pytest.importorskip("peft")
    model, tok = tiny_pair("llama")
    config = peft.LoraConfig(r=2, target_modules=["q_proj"], task_type=task_type)
    wrapped = peft.get_peft_model(model, config)  # its forward passes past_key_values in **kwargs
    assert reuse_limitation(wrapped) == ""
    percache.enable(wrapped, tok).close()
