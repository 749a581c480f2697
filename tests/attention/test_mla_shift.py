"""Shifted reuse on MLA models (DeepSeek-V2/V3 and kin): transformers 5 caches their compressed
latent as keys and the shared RoPE key part as values, so the RoPE shift moves the values."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from percache_plugin.attention.rope_verify import verified_shifter
from percache_plugin.conformance import PASS, SuiteOptions, byte_tokenizer, run_suite
from percache_plugin.conformance.families import build_family
from percache_plugin.kv.edit import CacheEditor
from tests.conformance.helpers import by_name


def _prefill(model: torch.nn.Module, ids: list[int]) -> DynamicCache:
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("family", ["deepseek_v3", "deepseek_v2"])
def test_mla_models_pass_the_shifted_checks(family: str) -> None:
    # No layout of the keys slot reproduced the keys at shifted positions (it holds the
    # position-free latent), so shifted reuse was "not applicable" on every MLA family.
    model = build_family(family)
    shifter = verified_shifter(model)
    assert shifter.rope_slot == "values"
    assert shifter.rotary_dims == model.config.qk_rope_head_dim
    report = run_suite(model, byte_tokenizer(), label=family,
                       options=SuiteOptions(min_agreement=0.5),
                       checks=["rope_shift", "splice_recompute_all", "shifted_reuse"])
    for name, result in by_name(report).items():
        assert result.status == PASS, f"{name}: {result.outcome.message}"
    assert {c.name: c.status for c in report.capabilities}["shifted_reuse"] == "supported"


def test_shift_kv_moves_only_the_slot_that_holds_the_rope_part() -> None:
    model = build_family("deepseek_v3")
    shifter = verified_shifter(model)
    cache = _prefill(model, list(range(10, 30)))
    k, v = cache.layers[0].keys, cache.layers[0].values
    k2, v2 = shifter.shift_kv(k, v, 0, 5)
    assert k2 is k and not torch.equal(v2, v)
    moved = _prefill(model, list(range(10, 30)))  # same ids 5 positions later, via position_ids
    with torch.inference_mode():
        later = DynamicCache()
        model(input_ids=torch.tensor([list(range(10, 30))]), past_key_values=later,
              position_ids=torch.arange(5, 25)[None], use_cache=True)
    assert (v2 - later.layers[0].values).abs().max().item() <= 1e-4
    assert torch.equal(moved.layers[0].keys, later.layers[0].keys)  # the latent has no phase


def test_evict_on_an_mla_cache_rotates_the_values() -> None:
    model = build_family("deepseek_v3")
    ids = list(range(10, 40))
    cache = _prefill(model, ids)
    CacheEditor(cache, verified_shifter(model)).evict(5, 12)
    fresh = _prefill(model, ids[:5] + ids[12:])
    for got, want in ((cache.layers[0].values, fresh.layers[0].values),
                      (cache.layers[0].keys, fresh.layers[0].keys)):
        assert (got - want).abs().max().item() <= 1e-4
