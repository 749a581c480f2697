"""enable() checks, for families the profile table does not know, that the attention hook fires
once per attention layer (else exact reuse through the model's own attention, shifted reuse not
applicable, with the reason), and refuses a model whose plain-cache forward fails. Families
whose shifted reuse the suite found wrong report it not applicable; MLA and MPT/Whisper context
lengths are read right."""

from __future__ import annotations

import pytest

import percache_plugin as percache
from percache_plugin.conformance.families import build_family
from percache_plugin.conformance.tiny import byte_tokenizer
from percache_plugin.decode import context_limit

SEGMENTS = ["System.", "alpha beta gamma " * 3, "Q?"]


@pytest.mark.parametrize(("family", "reason"), [
    ("diffllama", "fired for layers [0, 0, 1, 1]"),  # differential attention: two calls per layer
    ("git", "never fired"),
])
def test_unreliable_hook_falls_back_to_the_models_attention(family: str, reason: str) -> None:
    model = build_family(family)
    before = model.config._attn_implementation
    pc = percache.enable(model, byte_tokenizer())
    caps = pc.capabilities
    assert not caps.attention_hook and not caps.shifted_reuse and caps.exact_reuse
    assert reason in caps.reasons["attention_hook"]
    assert model.config._attn_implementation == before
    _warm_equals_plain(pc)


def _warm_equals_plain(pc: percache.PerCache) -> None:
    with pc.disabled():
        want = pc.generate(SEGMENTS, max_new_tokens=3, do_sample=False)
    pc.generate(SEGMENTS, max_new_tokens=3, do_sample=False)
    warm = pc.generate(SEGMENTS, max_new_tokens=3, do_sample=False)
    assert warm.stats.tokens_reused > 0 and warm.text == want.text
    pc.close()


def test_model_whose_plain_cache_forward_fails_is_refused() -> None:
    model = build_family("deepseek_v32")  # sparse attention: an indexer cache layer of its own
    before = model.config._attn_implementation
    with pytest.raises(percache.UnsupportedModelError, match="plain per-token K/V cache"):
        percache.enable(model, byte_tokenizer())
    assert model.config._attn_implementation == before


def test_family_found_wrong_under_shifted_reuse_reports_it() -> None:
    pc = percache.enable(build_family("doge"), byte_tokenizer())
    assert pc.capabilities.exact_reuse and not pc.capabilities.shifted_reuse
    assert "dynamic mask" in pc.capabilities.reasons["shifted_reuse"]
    pc.close()


def test_mla_tiny_model_runs_exact_reuse() -> None:
    model = build_family("deepseek_v2")
    assert model.config.num_key_value_heads == model.config.num_attention_heads
    _warm_equals_plain(percache.enable(model, byte_tokenizer()))


@pytest.mark.parametrize(("family", "limit"), [("mpt", 2048), ("whisper", 448)])
def test_context_length_is_the_smallest_named_limit(family: str, limit: int) -> None:
    # The tiny configs carry max_position_embeddings=8192 beside MPT's max_seq_len and
    # Whisper's max_target_positions.
    assert context_limit(build_family(family)) == limit


def test_model_that_does_not_continue_from_a_plain_cache_is_refused() -> None:
    # CPM-Ant prepends learned prompt tokens and expects the whole sequence at every step.
    model = build_family("cpmant")
    before = model.config._attn_implementation
    with pytest.raises(percache.UnsupportedModelError, match="does not continue from cached K/V"):
        percache.enable(model, byte_tokenizer())
    assert model.config._attn_implementation == before
