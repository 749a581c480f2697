"""Grouped-query attention with folded query groups: sdpa's values to float rounding, only for
the calls it is meant for, and in drafted decoding the plain tokens."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import percache_plugin as percache
from percache_plugin.decode.folded import fold_applies, folded_sdpa
from percache_plugin.decode.packed import PackedLinears, packing_problem
from tests.helpers import SEGMENTS, baseline, tiny_pair

SDPA = torch.nn.functional.scaled_dot_product_attention


def _inputs(rows: int, kv: int, heads: int = 9, groups: int = 3, *, float_mask: bool = False) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(rows * 1000 + kv)
    # the query as attention modules hand it over: (batch, seq, heads, dim) transposed, not contiguous
    query = torch.randn(1, rows, heads, 64, generator=g).transpose(1, 2)
    key = torch.randn(1, heads // groups, kv, 64, generator=g)
    value = torch.randn(1, heads // groups, kv, 64, generator=g)
    mask = (torch.arange(kv - rows, kv)[:, None] >= torch.arange(kv)[None, :]).view(1, 1, rows, kv)
    if float_mask:
        mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    return query, key, value, mask


@pytest.mark.parametrize(("rows", "kv", "float_mask"), [(2, 40, False), (3, 605, True), (5, 605, False), (17, 300, True)])
def test_folded_attention_gives_sdpas_values(rows: int, kv: int, float_mask: bool) -> None:
    query, key, value, mask = _inputs(rows, kv, float_mask=float_mask)
    kwargs = {"attn_mask": mask, "dropout_p": 0.0, "scale": 0.125, "enable_gqa": True}
    assert fold_applies((query, key, value), kwargs)
    theirs = SDPA(query, key, value, **kwargs)
    ours = folded_sdpa(query, key, value, mask, scale=0.125)
    assert ours.shape == theirs.shape == (1, 9, rows, 64)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_folding_keeps_each_query_heads_own_key_value_head() -> None:
    """Changing the keys of one key/value head changes the output of its query heads only."""
    query, key, value, mask = _inputs(4, 50)
    before = folded_sdpa(query, key, value, mask)
    key = key.clone()
    key[:, 1] += 1.0
    after = folded_sdpa(query, key, value, mask)
    changed = [bool((before[:, h] != after[:, h]).any()) for h in range(9)]
    assert changed == [False] * 3 + [True] * 3 + [False] * 3


def test_other_calls_are_not_folded() -> None:
    query, key, value, mask = _inputs(4, 50)
    ok = {"attn_mask": mask, "enable_gqa": True}
    assert fold_applies((query, key, value), ok)
    assert not fold_applies((query, key, value), {"attn_mask": mask})  # no enable_gqa: heads expanded
    assert not fold_applies((query, key, value), {"enable_gqa": True})  # no mask
    assert not fold_applies((query, key, value), {**ok, "dropout_p": 0.1})
    assert not fold_applies((query, key, value), {**ok, "is_causal": True})
    assert not fold_applies((query, key, value), {**ok, "attn_mask": mask.expand(1, 9, 4, 50)})  # per head
    assert not fold_applies((query, key), {**ok, "value": value})
    one = _inputs(1, 50)
    assert not fold_applies(one[:3], {"attn_mask": one[3], "enable_gqa": True})  # one row
    assert not fold_applies((query, key.repeat(1, 3, 1, 1), value.repeat(1, 3, 1, 1)), ok)  # no groups


@pytest.mark.skipif(bool(packing_problem(torch.nn.Linear(2, 2))), reason="torch without oneDNN")
def test_verify_forwards_fold_attention_and_keep_the_plain_tokens() -> None:
    model, tok = tiny_pair("llama")
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    pc = percache.enable(model, tok, draft_verify_cost=(1.0,))
    plain, _ = baseline(model, pc.prompt(SEGMENTS).input_ids, max_new_tokens=24)
    gen = pc.generate(SEGMENTS, max_new_tokens=24)
    assert gen.token_ids == plain and gen.stats.tokens_drafted > 0
    assert gen.stats.folded_attention_calls > 0
    pc.configure(draft_packed_linears=False)
    gen = pc.generate(SEGMENTS, max_new_tokens=24)
    assert gen.token_ids == plain and gen.stats.folded_attention_calls == 0
    pc.close()


@pytest.mark.skipif(bool(packing_problem(torch.nn.Linear(2, 2))), reason="torch without oneDNN")
def test_the_route_folds_only_where_asked() -> None:
    layer = torch.nn.Linear(4, 4)
    packed = PackedLinears(layer)
    query, key, value, mask = _inputs(3, 30)
    for fold in (True, False):
        packed.fold_attention = fold
        with packed.active() as route:
            out = SDPA(query, key, value, attn_mask=mask, enable_gqa=True)
        assert route.folds == int(fold) and packed.folded_calls == 1
        torch.testing.assert_close(out, SDPA(query, key, value, attn_mask=mask, enable_gqa=True))
