"""CacheEditor: delete slots, shift keys; round trips and agreement with direct computation."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from percache_plugin.attention.rope import NotShiftable, RopeShifter
from percache_plugin.kv.edit import CacheEditor
from tests.models import tiny_model


def _prefill(model: torch.nn.Module, ids: list[int]) -> DynamicCache:
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("family", ["llama", "phi3", "gemma3"])
def test_evict_equals_the_keys_of_the_remaining_tokens_at_their_new_positions(family: str) -> None:
    model = tiny_model(family)
    ids = list(range(10, 40))
    cache = _prefill(model, ids)
    editor = CacheEditor(cache, RopeShifter.from_model(model))
    deleted: list[list[int]] = []
    editor.on_delete = deleted.append
    editor.evict(5, 12)
    assert deleted == [list(range(5, 12))] and editor.n_slots == 23
    # Layer 0 keys depend only on each token and its position: compare with a fresh prefill.
    fresh = _prefill(model, ids[:5] + ids[12:])
    got, want = cache.layers[0].keys, fresh.layers[0].keys
    assert (got - want).abs().max().item() <= 1e-4
    assert editor.edits == [("delete", 7), ("shift", 5, 23, -7)]


def test_shift_round_trips_and_bad_spans_are_named() -> None:
    model = tiny_model("qwen2")
    cache = _prefill(model, list(range(10, 30)))
    before = [lay.keys.clone() for lay in cache.layers]
    editor = CacheEditor(cache, RopeShifter.from_model(model))
    editor.shift((4, 20), 9)
    editor.shift((4, 20), -9)
    for lay, k in zip(cache.layers, before, strict=True):
        assert (lay.keys - k).abs().max().item() <= 1e-5
    with pytest.raises(IndexError, match="outside"):
        editor.shift((4, 21), 1)
    with pytest.raises(IndexError, match="cannot delete"):
        editor.delete([25])
    with pytest.raises(NotShiftable, match="no RoPE"):
        CacheEditor(cache, None, shift_reason="no RoPE here").shift((0, 2), 1)


def test_edits_never_write_into_shared_tensors() -> None:
    model = tiny_model("llama")
    cache = _prefill(model, list(range(10, 30)))
    k0 = cache.layers[0].keys
    snapshot = k0.clone()
    CacheEditor(cache, RopeShifter.from_model(model)).evict(2, 6)
    assert torch.equal(k0, snapshot) and cache.layers[0].keys is not k0
