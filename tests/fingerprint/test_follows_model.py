"""The fingerprint follows the weights in use: real peft LoRA adapters enabled, disabled,
switched, added and merged, and weights edited in place, on a tiny Llama. In each case the
cached answer equals the uncached one and the fingerprint changed (and came back when the
weights did)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from percache_plugin import enable
from percache_plugin.stats import Generation
from tests.helpers import SEGMENTS, tiny_pair

peft = pytest.importorskip("peft")

OTHER = [*SEGMENTS[:-1], "Who brings the projector?"]


def lora(model: Any, name: str = "default", seed: int = 1) -> Any:
    """A non-zero LoRA adapter (random A and B) on the attention projections."""
    config = peft.LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj"],
                             init_lora_weights=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if isinstance(model, peft.PeftModel):
            model.add_adapter(name, config)
            return model
        return peft.get_peft_model(model, config, adapter_name=name)


@pytest.fixture
def pair() -> Iterator[tuple[Any, Any]]:
    model, tok = tiny_pair("llama")
    yield lora(model), tok


def same(pc: Any, segments: list[str]) -> Generation:
    """Generate through the cache and check it against the model without percache."""
    got = pc.generate(segments, max_new_tokens=6)
    with pc.disabled():
        want = pc.generate(segments, max_new_tokens=6)
    assert got.first_logits is not None and want.first_logits is not None
    diff = float((got.first_logits - want.first_logits).abs().max())
    assert diff <= 1e-4, f"cached first-token logits off by {diff:.3g}"
    assert got.token_ids == want.token_ids
    return got


def test_disable_adapter_changes_the_key_and_reenabling_restores_it(pair: tuple[Any, Any]) -> None:
    model, tok = pair
    pc = enable(model, tok)
    same(pc, SEGMENTS)
    on = pc.fingerprint
    with model.disable_adapter():
        got = same(pc, SEGMENTS)
        assert got.stats.tokens_reused == 0  # nothing stored under the adapter is served
        assert pc.fingerprint != on
    assert pc.fingerprint == on
    again = same(pc, SEGMENTS)
    assert again.stats.tokens_reused > 0  # valid again, served again
    pc.disable()


def test_enable_inside_disable_adapter_differs(pair: tuple[Any, Any]) -> None:
    model, tok = pair
    pc = enable(model, tok)
    on = pc.fingerprint
    pc.disable()
    with model.disable_adapter():
        pc = enable(model, tok)
        assert pc.fingerprint != on
        pc.disable()


def test_set_adapter_and_add_adapter(pair: tuple[Any, Any]) -> None:
    model, tok = pair
    pc = enable(model, tok)
    same(pc, SEGMENTS)
    first = pc.fingerprint
    lora(model, "other", seed=2)  # add_adapter: new weights, still "default" active
    same(pc, SEGMENTS)
    added = pc.fingerprint
    assert added != first
    model.set_adapter("other")
    got = same(pc, SEGMENTS)
    assert got.stats.tokens_reused == 0
    assert pc.fingerprint not in (first, added)
    model.set_adapter("default")
    assert pc.fingerprint == added
    assert same(pc, SEGMENTS).stats.tokens_reused > 0
    pc.disable()


def test_merge_and_unmerge(pair: tuple[Any, Any]) -> None:
    model, tok = pair
    pc = enable(model, tok)
    same(pc, SEGMENTS)
    before = pc.fingerprint
    model.base_model.merge_adapter()
    same(pc, OTHER)
    merged = pc.fingerprint
    assert merged != before
    with model.disable_adapter():  # merged weights without the adapter: unmerged inside
        same(pc, SEGMENTS)
        assert pc.fingerprint not in (before, merged)
    model.base_model.unmerge_adapter()
    assert pc.fingerprint != merged
    same(pc, SEGMENTS)
    pc.disable()


@pytest.mark.parametrize("edit", ["add_", "copy_", "replace"])
def test_in_place_weight_edit(edit: str) -> None:
    model, tok = tiny_pair("llama")
    pc = enable(model, tok)
    same(pc, SEGMENTS)
    before = pc.fingerprint
    layer = model.model.layers[1].self_attn.k_proj
    saved = layer.weight.detach().clone()
    with torch.no_grad():
        if edit == "add_":
            layer.weight.add_(0.5)
        elif edit == "copy_":
            layer.weight.copy_(torch.randn_like(saved))
        else:
            layer.weight = torch.nn.Parameter(saved * -1.0)
    assert same(pc, SEGMENTS).stats.tokens_reused == 0
    assert pc.fingerprint != before
    with torch.no_grad():
        layer.weight.copy_(saved)  # the same values again: the same key, served again
    assert pc.fingerprint == before
    assert same(pc, SEGMENTS).stats.tokens_reused > 0
    pc.disable()


def test_edit_through_data_needs_refresh() -> None:
    """``param.data`` writes bypass version counters: refresh_fingerprint() hashes again."""
    model, tok = tiny_pair("llama")
    pc = enable(model, tok)
    same(pc, SEGMENTS)
    before = pc.fingerprint
    model.model.layers[0].self_attn.v_proj.weight.data += 0.5
    assert pc.refresh_fingerprint() != before
    assert same(pc, SEGMENTS).stats.tokens_reused == 0
    pc.disable()


def test_models_differing_in_a_few_embedding_rows() -> None:
    a, tok = tiny_pair("llama")
    b, _ = tiny_pair("llama")
    with torch.no_grad():  # rows 4, 9 and 14 hold none of the 256 values a sample would read
        b.model.embed_tokens.weight[[4, 9, 14]] += 1.0
    pa, pb = enable(a, tok), enable(b, tok)
    assert pa.fingerprint != pb.fingerprint
    pa.disable()
    pb.disable()
