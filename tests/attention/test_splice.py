"""The splice path: recompute-everything equals a full prefill; one stale slot breaks it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import percache_plugin as percache
from percache_plugin.attention.splice import SpliceCache, splice_mask
from tests.helpers import SEGMENTS, baseline, tiny_pair
from tests.models import TINY_FAMILIES

ROPE_FAMILIES = [f for f in TINY_FAMILIES if f != "gpt2"]
REORDERED = [SEGMENTS[0], SEGMENTS[3], SEGMENTS[1], SEGMENTS[2], SEGMENTS[4]]
GEN = {"max_new_tokens": 6, "do_sample": False}


class AllButOne:
    """Recompute every shifted position except one (the negative control)."""

    def __init__(self, leave: int) -> None:
        self.leave = leave

    @percache.hookimpl
    def percache_select_recompute(self, ctx: Any, prompt: Any, plan: Any, context: Any) -> list[int]:
        cand = context.candidates.tolist()
        return cand[: self.leave] + cand[self.leave + 1:]


def _shifted_pc(family: str, **config: Any) -> tuple[Any, percache.PerCache]:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, reuse="shifted", **config)
    pc.generate(SEGMENTS, **GEN)  # stores the chunks in the original order
    return model, pc


@pytest.mark.parametrize("family", ROPE_FAMILIES)
def test_recompute_all_equals_full_prefill(family: str) -> None:
    model, pc = _shifted_pc(family, recompute="all")
    g = pc.generate(REORDERED, **GEN)
    want, logits = baseline(model, g.prompt_ids, GEN["max_new_tokens"])
    assert g.stats.tokens_recomputed > 0 and g.stats.tokens_shifted == 0
    assert not g.stats.approximate and not g.stats.fallback
    assert g.token_ids == want
    # fp32 summation-order error only: measured up to 5.8e-6 (phi3) with logits of magnitude ~5
    # (tests.models.TINY_INIT_RANGE); 1e-5 left under 2x headroom.
    assert (g.first_logits - logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", ["llama", "gemma2", "phi3"])
def test_one_stale_slot_breaks_equivalence(family: str) -> None:
    model, pc = _shifted_pc(family, recompute="all")
    pc.plugins.register(AllButOne(leave=0))
    g = pc.generate(REORDERED, **GEN)
    _, logits = baseline(model, g.prompt_ids, GEN["max_new_tokens"])
    assert g.stats.tokens_shifted == 1 and g.stats.approximate
    # Ten times the equivalence test's tolerance: that test would catch this one stale slot.
    assert (g.first_logits - logits).abs().max().item() > 1e-3


@pytest.mark.parametrize("family", ROPE_FAMILIES)
def test_shifted_reuse_is_reported(family: str) -> None:
    model, pc = _shifted_pc(family, recompute="none")
    assert pc.capabilities.shifted_reuse
    g = pc.generate(REORDERED, **GEN)
    s = g.stats
    assert s.tokens_shifted > 0 and s.tokens_recomputed == 0 and s.approximate
    assert s.tokens_reused + s.tokens_shifted + s.tokens_computed == s.prompt_tokens


def test_exact_config_forbids_shifted_reuse(tmp_path: Any) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, reuse="shifted", recompute="none")
    pc.generate(SEGMENTS, **GEN)
    approx = pc.generate(REORDERED[:3] + ["New chunk about the venue.", SEGMENTS[-1]], **GEN)
    assert approx.stats.approximate
    pc.disable()
    # An exact handle on the same store never serves shifted or approximate-context K/V.
    pc = percache.enable(model, tok, store=tmp_path, reuse="exact")
    g = pc.generate(REORDERED[:3] + ["New chunk about the venue.", SEGMENTS[-1]], **GEN)
    want, logits = baseline(model, g.prompt_ids, GEN["max_new_tokens"])
    assert g.stats.tokens_shifted == 0 and not g.stats.approximate
    assert g.token_ids == want and (g.first_logits - logits).abs().max().item() <= 1e-4


def test_strategy_outside_candidates_falls_back() -> None:
    model, pc = _shifted_pc("llama")

    class Bad:
        @percache.hookimpl
        def percache_select_recompute(self, ctx: Any, prompt: Any, plan: Any, context: Any) -> list[int]:
            return [0]  # the system prompt is exact, not a candidate

    pc.plugins.register(Bad())
    g = pc.generate(REORDERED, **GEN)
    want, _ = baseline(model, g.prompt_ids, GEN["max_new_tokens"])
    assert "outside the shifted chunks" in g.stats.fallback
    assert g.token_ids == want and g.stats.tokens_reused == 0


def test_gpt2_cannot_shift_and_says_why() -> None:
    model, tok = tiny_pair("gpt2")
    pc = percache.enable(model, tok, reuse="shifted")
    assert not pc.capabilities.shifted_reuse
    assert "learned" in pc.capabilities.reasons["shifted_reuse"]


def test_splice_cache_checks_positions() -> None:
    k = torch.zeros(1, 2, 5, 4)
    cache = SpliceCache([k], [k.clone()])
    with pytest.raises(ValueError, match="sorted, unique"):
        with cache.splice(torch.tensor([3, 1])):
            pass
    with pytest.raises(ValueError, match="within"):
        with cache.splice(torch.tensor([5])):
            pass
    with cache.splice(torch.tensor([1, 3])):
        keys, _ = cache.update(torch.ones(1, 2, 2, 4), torch.ones(1, 2, 2, 4), 0)
    assert keys[0, 0, :, 0].tolist() == [0, 1, 0, 1, 0]


def test_splice_mask_causal_and_window() -> None:
    m = splice_mask(torch.tensor([2, 4]), 5, dtype=torch.float32, sliding_window=2)
    allowed = (m[0, 0] == 0).int().tolist()
    assert allowed == [[0, 1, 1, 0, 0], [0, 0, 0, 1, 1]]


def test_pieces_before_the_first_shifted_chunk_join_the_tree() -> None:
    """Regression: after shifted reuse every computed piece was stored outside the tree, so a
    new chunk placed before the shifted ones never served exact reuse later."""
    model, pc = _shifted_pc("llama", recompute="none")
    new = "Dana: the venue changed to the east hall."
    segs = [SEGMENTS[0], new, SEGMENTS[3], SEGMENTS[1], SEGMENTS[-1]]
    first = pc.generate(segs, **GEN)
    assert first.stats.tokens_shifted > 0
    again = pc.generate([SEGMENTS[0], new, "A different chunk.", SEGMENTS[-1]], **GEN)
    prompt = pc.prompt([SEGMENTS[0], new, "A different chunk.", SEGMENTS[-1]])
    assert again.stats.tokens_reused == prompt.pieces[2].start  # system + the new chunk, exactly
    want, logits = baseline(model, again.prompt_ids, GEN["max_new_tokens"])
    assert again.token_ids == want and (again.first_logits - logits).abs().max().item() <= 1e-4
