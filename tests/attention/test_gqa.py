"""Grouped-query sdpa without copied key/value heads: the same values as transformers' sdpa."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import percache_plugin as percache
from percache_plugin.attention.gqa import grouped_sdpa, groups_kept
from tests.helpers import tiny_pair


class _Attention(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def _inputs(q: int, kv: int, heads: int = 9, groups: int = 3) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(q * 1000 + kv)
    query = torch.randn(1, heads, q, 64, generator=g)
    key = torch.randn(1, heads // groups, kv, 64, generator=g)
    value = torch.randn(1, heads // groups, kv, 64, generator=g)
    mask = (torch.arange(kv - q, kv)[:, None] >= torch.arange(kv)[None, :]).view(1, 1, q, kv)
    return query, key, value, mask


@pytest.mark.parametrize(("q", "kv"), [(2, 40), (5, 605), (17, 300)])
def test_grouped_heads_with_a_mask_give_the_same_values_bit_for_bit(q: int, kv: int) -> None:
    module = _Attention(3)
    query, key, value, mask = _inputs(q, kv)
    kwargs: dict[str, Any] = {"scaling": 0.125, "dropout": 0.0}
    assert groups_kept(module, query, key, value, mask, kwargs)
    ours, none = grouped_sdpa(module, query, key, value, mask, **kwargs)
    theirs, _ = sdpa_attention_forward(module, query, key, value, mask, **kwargs)
    assert none is None and ours.shape == theirs.shape == (1, q, 9, 64)
    assert torch.equal(ours, theirs)


def test_other_calls_go_to_transformers() -> None:
    module = _Attention(3)
    query, key, value, mask = _inputs(1, 50)
    assert not groups_kept(module, query, key, value, mask, {})  # one query token: pack_gqa there
    query, key, value, mask = _inputs(4, 50)
    assert not groups_kept(module, query, key, value, None, {})  # no mask: enable_gqa there
    assert not groups_kept(_Attention(1), query, key[:, :1].expand(1, 9, 50, 64), value, mask, {})
    assert not groups_kept(module, query, key, value, mask, {"position_bias": torch.zeros(1)})
    assert not groups_kept(module, query, key, value, mask, {"output_attentions": True})
    ours, _ = grouped_sdpa(module, query, key, value, None, scaling=0.125)
    theirs, _ = sdpa_attention_forward(module, query, key, value, None, scaling=0.125)
    assert torch.equal(ours, theirs)


def test_a_tiny_gqa_model_over_a_cache_gives_the_same_logits_enabled() -> None:
    model, tok = tiny_pair("llama")
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    ids = torch.arange(3, 40).view(1, -1)

    def logits() -> torch.Tensor:
        cache = DynamicCache()
        with torch.inference_mode():
            model(input_ids=ids[:, :30], past_key_values=cache, use_cache=True)
            return model(input_ids=ids[:, 30:], past_key_values=cache, use_cache=True).logits

    plain = logits()
    pc = percache.enable(model, tok)
    try:
        assert torch.equal(logits(), plain)  # 7 tokens over 30 cached: a mask, grouped heads
    finally:
        pc.close()
