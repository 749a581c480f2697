"""Models whose attention does not go through percache's masks (Falcon, GPT-J, Bloom, ...): an
extra mask cannot apply to them, so it is refused, not ignored, and masked eviction evicts
exactly instead (``tests/session/test_evict.py``); an attention plugin, never called there, is
named in a warning and in the suite's ``attention_switch`` reason."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import percache_plugin as percache
from percache_plugin.conformance import SuiteOptions, run_suite
from tests.engine.test_switch import Count
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


def test_an_attention_plugin_never_called_is_said(caplog: pytest.LogCaptureFixture) -> None:
    counter = Count()
    pc = percache.enable(falcon_model(), byte_tokenizer(), plugins=[counter])
    with caplog.at_level("WARNING", logger="percache"):
        pc.generate(SEGMENTS, max_new_tokens=2)
        pc.generate(SEGMENTS, max_new_tokens=2)
    said = [r.getMessage() for r in caplog.records if "never called" in r.getMessage()]
    assert counter.calls == 0 and len(said) == 1  # once per plugin, not per request
    assert "tests.engine.test_switch.Count" in said[0] and "FalconForCausalLM" in said[0]
    pc.close()
    report = run_suite(falcon_model(), byte_tokenizer(), checks=["attention_switch"],
                       options=SuiteOptions(plugins=(Count(),)))
    assert "never called here: percache_attention of tests.engine.test_switch.Count" in (
        report.results[0].outcome.message)
