"""On the real SmolLM2 with a LoRA adapter, the cached answer equals the uncached one after
``disable_adapter()`` (it was off by ~10 in the first-token logits when the fingerprint was
computed once in enable())."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from percache_plugin import enable
from percache_plugin.demo import SAMPLE_CHUNKS, SYSTEM

peft = pytest.importorskip("peft")
pytestmark = pytest.mark.slow

SEGMENTS = [SYSTEM, *SAMPLE_CHUNKS, "Who borrowed the projector?"]


def test_disable_adapter_on_smollm2_serves_no_stale_kv(smollm2: tuple[Any, Any]) -> None:
    model, tok = smollm2
    config = peft.LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj"],
                             init_lora_weights=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = peft.get_peft_model(model, config)
    pc = enable(model, tok)
    pc.generate(SEGMENTS, max_new_tokens=4)  # stored under the adapter
    on = pc.fingerprint
    with model.disable_adapter():
        got = pc.generate(SEGMENTS, max_new_tokens=8)
        with pc.disabled():
            want = pc.generate(SEGMENTS, max_new_tokens=8)
        assert pc.fingerprint != on
    assert got.first_logits is not None and want.first_logits is not None
    assert float((got.first_logits - want.first_logits).abs().max()) <= 1e-4
    assert got.token_ids == want.token_ids
    pc.close()
