"""Models whose attention does not go through percache's masks (Falcon, GPT-J, Bloom, ...): an
extra mask cannot apply to them, so it is refused, not ignored, and masked eviction evicts
exactly instead (``tests/session/test_evict.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import percache_plugin as percache
from tests.helpers import SEGMENTS, VOCAB, tiny_pair
from tests.tokenizer import byte_tokenizer


def falcon_model() -> Any:
    """A tiny random Falcon (attention not through AttentionInterface)."""
    cfg = AutoConfig.for_model("falcon", vocab_size=VOCAB, hidden_size=64, num_attention_heads=4,
                               num_hidden_layers=2, initializer_range=0.2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(cfg).eval()


class HideFirstTen:
    @percache.hookimpl
    def percache_mask_function(self, ctx: Any) -> Any:
        return lambda b, h, q, kv: kv >= 10


def test_an_extra_mask_is_refused_where_it_cannot_apply() -> None:
    model = falcon_model()
    pc = percache.enable(model, byte_tokenizer(), plugins=[HideFirstTen()])
    assert not pc.capabilities.attention_hook
    # Before, the mask was ignored: the same logits as without it.
    with pytest.raises(RuntimeError, match="percache_mask_function cannot apply to FalconForCausalLM"):
        pc.generate(SEGMENTS, max_new_tokens=2)
    pc.close()
    llama, tok = tiny_pair("llama")  # where it applies, it changes the answer
    pc = percache.enable(llama, tok)
    plain = pc.generate(SEGMENTS, max_new_tokens=1).first_logits
    pc.plugins.register(HideFirstTen())
    masked = pc.generate(SEGMENTS, max_new_tokens=1).first_logits
    assert (plain - masked).abs().max().item() > 1e-2
    pc.close()
