"""The capability matrix's builder on families it used to skip: per-family config overrides
(data in ``conformance/overrides.py``) and the generic shrinking rules they rest on, and the
suite on a KV-sharing family (Gemma 3n)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from percache_plugin.conformance import NA, PASS, SuiteOptions, byte_tokenizer, run_suite
from percache_plugin.conformance.families import Unbuildable, build_family, tiny_config
from percache_plugin.conformance.overrides import DROP, FAMILY_SKIPS, apply_overrides
from tests.conformance.helpers import by_name

FORMERLY_SKIPPED = ["deepseek_v3", "gemma4_text", "gemma3n_text", "dbrx", "bamba", "falcon_h1",
                    "granitemoehybrid", "mamba2", "jamba", "zamba", "zamba2", "lfm2_moe",
                    "qwen4_exp_text", "dots3_note_text", "recurrent_gemma", "xlnet", "prophetnet"]


@pytest.mark.parametrize("family", FORMERLY_SKIPPED)
def test_formerly_skipped_family_builds_and_runs_a_forward(family: str) -> None:
    model = build_family(family)  # raises Unbuildable with the reason otherwise
    assert sum(p.numel() for p in model.parameters()) < 2_000_000


def test_mla_head_dim_is_the_rope_part() -> None:
    # DeepSeek-V3 rotates head_dim dims of its keys' RoPE part (qk_rope_head_dim): shrinking
    # head_dim to 16 beside an 8-dim RoPE part broke the plain forward (size 4 vs 8).
    config = tiny_config("deepseek_v3")
    assert config.head_dim == config.qk_rope_head_dim == 8
    assert config.num_key_value_heads == config.num_attention_heads


def test_per_layer_config_moves_onto_the_shrunk_layers() -> None:
    # Gemma 4's full-attention layers have 2x wider heads, keyed by the default's layer indices
    # (5, 11, ...): the toy config rejected them; each shrunk layer takes its type's overrides.
    config = tiny_config("gemma4_text")
    assert config.layer_types == ["sliding_attention", "full_attention"]
    heads = [layer.head_dim for layer in config.per_layer_config]
    assert heads == [16, 32]


def test_derived_layer_types_are_left_to_the_config() -> None:
    # Bamba derives layer types from attn_layer_indices (a read-only property); Zamba2 derives
    # hybrid_layer_ids from layers_block_type, which must be set by its real name.
    assert tiny_config("bamba").layers_block_type == ["linear_attention", "full_attention"]
    zamba2 = tiny_config("zamba2")
    assert zamba2.hybrid_layer_ids == [i for i, t in enumerate(zamba2.layers_block_type)
                                       if t == "hybrid"] == [1]


def test_overrides_merge_into_sub_configs_and_drop_fields() -> None:
    kwargs = {"a": 1, "text_config": {"b": 2, "c": 3}}
    got = apply_overrides("dots3_note", kwargs)
    assert "per_layer_config" not in got["text_config"] and got["text_config"]["b"] == 2
    assert got["vision_config"]["adapter_in_dim"] == 64
    assert kwargs == {"a": 1, "text_config": {"b": 2, "c": 3}}  # not mutated
    assert apply_overrides("xlnet", {"max_position_embeddings": 8}) == {"d_head": 16}
    assert DROP not in str(apply_overrides("prophetnet", {"num_hidden_layers": 2}))


@pytest.mark.parametrize("family", sorted(FAMILY_SKIPS))
def test_families_that_cannot_stand_alone_keep_a_precise_reason(family: str) -> None:
    with pytest.raises(Unbuildable) as info:
        build_family(family)
    assert info.value.reason == FAMILY_SKIPS[family]


def test_rope_shift_on_a_kv_sharing_model_checks_the_layers_its_cache_holds() -> None:
    # Gemma 3n's last layers reuse the K/V of earlier ones and add no cache layer: the check
    # indexed its per-layer errors by model layer and raised IndexError (a failed row).
    model = build_family("gemma3n_text")
    assert model.config.num_kv_shared_layers == 2
    report = run_suite(model, byte_tokenizer(), label="gemma3n_text",
                       options=SuiteOptions(min_agreement=0.5), checks=["rope_shift"])
    result = by_name(report)["rope_shift"]
    assert result.status == PASS, result.outcome.message
    assert len(result.outcome.details["per_layer"]) == 2


def test_splice_fills_the_cache_through_the_backbone_not_get_decoder_s_head() -> None:
    # ModernBERT-decoder's get_decoder() returns its vocabulary projection (an nn.Linear named
    # "decoder"); splice forwards called it with input_ids and raised TypeError, so shifted
    # reuse failed on it.
    model = build_family("modernbert-decoder")
    report = run_suite(model, byte_tokenizer(), label="modernbert-decoder",
                       options=SuiteOptions(min_agreement=0.5), checks=["splice_recompute_all"])
    result = by_name(report)["splice_recompute_all"]
    assert result.status == PASS, result.outcome.message


def test_a_bidirectional_causal_lm_class_is_refused_naming_is_decoder() -> None:
    # MegatronBertForCausalLM with is_decoder=False attends both ways: chunk K/V computed
    # without the tokens after it differs from a full prefill's; enable() accepted it and
    # draft_tree failed on it. The matrix now builds such families with is_decoder=True.
    config = tiny_config("megatron-bert")
    assert config.is_decoder is True
    config.is_decoder = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
    report = run_suite(model, byte_tokenizer(), label="megatron-bert",
                       options=SuiteOptions(min_agreement=0.5), checks=["exact_reuse"])
    result = by_name(report)["exact_reuse"]
    assert result.status == NA
    assert "bidirectional" in result.outcome.message and "is_decoder=True" in result.outcome.message
