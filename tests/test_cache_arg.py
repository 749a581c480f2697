"""percache names the cache the way the installed transformers does (``cache`` from 5.24,
``past_key_values`` before), in model calls and in generate's output."""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, LlamaForCausalLM

from percache_plugin.cache_arg import CACHE_ARG, CACHE_ARGS, cache_kw, decoder_output
from tests.models import tiny_model


def test_the_name_is_the_one_model_forwards_take() -> None:
    assert CACHE_ARG in CACHE_ARGS
    assert CACHE_ARG in inspect.signature(LlamaForCausalLM.forward).parameters


def test_a_cache_passed_by_that_name_is_the_one_the_model_fills() -> None:
    model = tiny_model("llama")
    cache = DynamicCache()
    model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True, **cache_kw(cache))
    assert cache.get_seq_length() == 3


def test_generate_output_carries_the_cache_in_its_field() -> None:
    cache = DynamicCache()
    out = decoder_output(torch.tensor([[1]]), None, None, cache)
    assert getattr(out, CACHE_ARG) is cache
