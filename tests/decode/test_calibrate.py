"""pc.measure_verify_cost(): the verify cost curve measured on the handle's model, set in the config."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from transformers import DynamicCache

import percache_plugin as percache
from percache_plugin.decode.calibrate import WARMUP_ROUNDS, measure_curve, time_forwards
from tests.helpers import SEGMENTS, tiny_pair

FAST = {"cached_tokens": 24, "max_k": 4, "repeats": 1, "progress": False}


def test_measure_returns_a_curve_and_sets_the_config() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    curve = pc.measure_verify_cost(**FAST)
    assert len(curve) == 4 and all(isinstance(r, float) and r >= 1.0 for r in curve)
    assert pc.config.draft_verify_cost == curve
    pc.close()


def test_measure_uses_the_packed_weights_as_drafting_does() -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, draft_packed_linears=True) as pc:
        pc.measure_verify_cost(**FAST)
        assert pc.engine.drafts.packed
    with percache.enable(model, tok, draft_packed_linears=False) as pc:
        pc.measure_verify_cost(**FAST)
        assert not pc.engine.drafts.packed


def test_measure_leaves_the_store_and_generation_unchanged() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, drafting=True)
    before = pc.generate(SEGMENTS, max_new_tokens=8)
    nodes = len(pc.store.nodes())
    pc.measure_verify_cost(**FAST)
    assert len(pc.store.nodes()) == nodes
    after = pc.generate(SEGMENTS, max_new_tokens=8)
    assert after.token_ids == before.token_ids
    pc.close()


@pytest.mark.parametrize(("name", "value"), [("cached_tokens", 0), ("max_k", -1), ("repeats", 2.5),
                                              ("max_k", True), ("cached_tokens", 10**6)])
def test_bad_arguments_raise_naming_the_argument(name: str, value: Any) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    with pytest.raises(ValueError, match=name):
        pc.measure_verify_cost(**{**FAST, name: value})
    assert pc.config.draft_verify_cost is None
    pc.close()


def test_time_forwards_crops_the_cache_back_and_counts_repeats() -> None:
    model, _ = tiny_pair("llama")
    ids = list(range(40))
    cache = DynamicCache()
    steps: list[int] = []
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids[:20]]), past_key_values=cache, use_cache=True)
        times = time_forwards(model, cache, ids, 20, [0, 1, 3], {"a": lambda k: _Null()}, 2,
                              step=lambda k, timed: steps.append(k))
    assert cache.get_seq_length() == 20
    assert all(len(v) == 2 for v in times.values()) and set(times) == {("a", 0), ("a", 1), ("a", 3)}
    assert len(steps) == (2 + WARMUP_ROUNDS) * 3


class _SlowSingle(torch.nn.Module):
    """The model, with a one-token forward made slower than any other."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.inner = model
        self.config = model.config

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        if input_ids.shape[1] == 1:
            time.sleep(0.02)
        return self.inner(input_ids=input_ids, **kwargs)


def test_ratios_below_one_are_clipped() -> None:
    model, _ = tiny_pair("llama")
    curve = measure_curve(_SlowSingle(model), cached_tokens=16, max_k=3, repeats=1, progress=False)
    assert curve == (1.0, 1.0, 1.0)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_forwards_on_cuda_are_timed_to_their_end() -> None:
    """A CUDA forward returns once queued: the timing waits for the device (not run on a GPU here)."""
    from percache_plugin.decode.calibrate import synchronizer

    assert synchronizer(torch.device("cpu"))() is None  # nothing queued on the CPU
    cuda = synchronizer(torch.device("cuda", 0))
    if torch.cuda.is_available():
        cuda()
    else:  # the CUDA wait is torch.cuda.synchronize, which fails without a GPU
        with pytest.raises((RuntimeError, AssertionError, AttributeError)):
            cuda()
