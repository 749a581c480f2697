"""Families whose attention is not interface-based still get exact reuse, and say so."""

from __future__ import annotations

import pytest
from transformers import AutoConfig, AutoModelForCausalLM

import percache_plugin as percache
from tests.helpers import SEGMENTS, VOCAB, baseline
from tests.tokenizer import byte_tokenizer

LEGACY = {
    "falcon": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
    "gptj": {"n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8, "n_positions": 512},
}


@pytest.mark.parametrize("model_type", sorted(LEGACY))
def test_exact_reuse_without_attention_interface(model_type: str) -> None:
    cfg = AutoConfig.for_model(model_type, vocab_size=VOCAB, **LEGACY[model_type])
    model = AutoModelForCausalLM.from_config(cfg).eval()
    tok = byte_tokenizer(chat_template=True)
    pc = percache.enable(model, tok)
    caps = pc.capabilities
    assert caps.exact_reuse
    if not caps.attention_hook:
        assert caps.reasons["attention_hook"]
    want, logits = baseline(model, pc.prompt(SEGMENTS).input_ids)
    pc.generate(SEGMENTS, max_new_tokens=8, do_sample=False)
    warm = pc.generate(SEGMENTS, max_new_tokens=8, do_sample=False)
    assert warm.stats.tokens_reused > 0
    assert warm.token_ids == want
    assert (warm.first_logits - logits).abs().max().item() <= 1e-4
