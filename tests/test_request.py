"""A request over K/V read layer by layer (Config.kv_overlap_reads): bit-identical to the
whole-file path, a layer failing its check mid-forward aborts that forward and the request is
computed again without the node, and no reader thread outlives its reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

import percache_plugin as percache
from percache_plugin.kv.layer_read import LayerReader
from tests.helpers import SEGMENTS, Recorder, baseline, tiny_pair
from tests.kv.test_layer_read import flip_byte, no_reader_left

GEN = {"max_new_tokens": 6, "do_sample": False}


def node_path(pc: percache.PerCache, piece: int) -> Path:
    key = pc.prompt(SEGMENTS).pieces[piece].key
    assert pc.store.path is not None
    return next((pc.store.path / "kv").rglob(f"{key}.safetensors"))


@pytest.mark.parametrize("ram", [0, 1 << 20])
def test_overlapped_reads_are_bit_identical_to_whole_reads(tmp_path: Path, ram: int) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, ram_cache_bytes=ram)
    pc.generate(SEGMENTS, **GEN)  # stores every node
    pc.close()
    out = {}
    for overlap in (False, True):
        pc = percache.enable(model, tok, store=tmp_path, ram_cache_bytes=ram, kv_overlap_reads=overlap)
        with mock.patch.object(LayerReader, "submit", autospec=True, side_effect=LayerReader.submit) as sub:
            out[overlap] = pc.generate(SEGMENTS, **GEN)
        assert sub.call_count == (out[overlap].stats.nodes_reused if overlap else 0)
        assert out[overlap].stats.tokens_reused > 0 and out[overlap].stats.load_misses == 0
        if ram:  # the chunks read in the background reach the RAM tier once checked
            again = pc.generate(SEGMENTS, **GEN)
            assert again.stats.ram_hits == again.stats.nodes_reused > 0
            assert torch.equal(again.first_logits, out[overlap].first_logits)
        pc.close()
    assert out[True].token_ids == out[False].token_ids
    assert torch.equal(out[True].first_logits, out[False].first_logits)
    assert no_reader_left()


@pytest.mark.parametrize("ram", [0, 1 << 20])
def test_a_corrupt_last_layer_aborts_the_forward_and_recomputes(tmp_path: Path, ram: int) -> None:
    model, tok = tiny_pair("llama")
    n_layers = model.config.num_hidden_layers
    pc = percache.enable(model, tok, store=tmp_path, ram_cache_bytes=ram)
    pc.generate(SEGMENTS, **GEN)
    ids = pc.prompt(SEGMENTS).input_ids
    flip_byte(node_path(pc, 0), f"v.{n_layers - 1}")  # the system prompt: the first node
    pc.close()
    with percache.enable(model, tok, store=tmp_path, ram_cache_bytes=ram) as pc:
        with pc.disabled():
            want, want_logits = baseline(model, ids, GEN["max_new_tokens"])
        g = pc.generate(SEGMENTS, **GEN)
        assert g.stats.corrupt_aborts == 1
        assert g.stats.tokens_reused == 0  # the first node is gone: everything computed
        assert g.token_ids == want
        assert (g.first_logits - want_logits).abs().max().item() <= 1e-4
        assert pc.store.stats().corrupt == 1
        assert pc.stats().corrupt_aborts == 1
        assert pc.generate(SEGMENTS, **GEN).stats.corrupt_aborts == 0  # stored again, served
    assert no_reader_left()


def stored_then_corrupted(tmp_path: Path, piece: int, kind: str) -> tuple[Any, Any, list[int]]:
    """A tiny model, its tokenizer and its answer to SEGMENTS, whose store at ``tmp_path`` holds
    every node, with one byte of the last layer's ``kind`` (``k`` or ``v``) of ``piece`` flipped."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, ram_cache_bytes=0)
    want = pc.generate(SEGMENTS, **GEN).token_ids
    flip_byte(node_path(pc, piece), f"{kind}.{model.config.num_hidden_layers - 1}")
    pc.close()
    return model, tok, want


def test_a_corrupt_later_node_keeps_the_nodes_before_it(tmp_path: Path) -> None:
    model, tok, want = stored_then_corrupted(tmp_path, 2, "k")
    with percache.enable(model, tok, store=tmp_path, ram_cache_bytes=0) as pc:
        pre = pc.prefill(SEGMENTS)  # prefill() recomputes the same way
        assert pre.stats.corrupt_aborts == 1 and pre.stats.nodes_reused == 2
        assert pc.store.stats().corrupt == 1
        assert pc.generate(SEGMENTS, **GEN).token_ids == want
    assert no_reader_left()


def test_without_overlap_a_corrupt_layer_is_a_plain_miss(tmp_path: Path) -> None:
    model, tok, want = stored_then_corrupted(tmp_path, 1, "v")
    with percache.enable(model, tok, store=tmp_path, ram_cache_bytes=0, kv_overlap_reads=False) as pc:
        g = pc.generate(SEGMENTS, **GEN)
        assert g.stats.corrupt_aborts == 0 and g.stats.load_misses == 1 and g.stats.nodes_reused == 1
        assert g.token_ids == want
    assert no_reader_left()



@pytest.mark.parametrize("drafting", [False, True])
def test_a_recomputed_request_streams_its_prompt_once(tmp_path: Path, drafting: bool) -> None:
    model, tok, want = stored_then_corrupted(tmp_path, 0, "v")
    with percache.enable(model, tok, store=tmp_path, ram_cache_bytes=0, drafting=drafting) as pc:
        streamer = Recorder()
        g = pc.generate(SEGMENTS, streamer=streamer, **GEN)
        assert g.stats.corrupt_aborts == 1
        ids = pc.prompt(SEGMENTS).input_ids
        assert streamer.puts[0] == ids  # the prompt, once; then one token at a time
        assert [t for p in streamer.puts[1:] for t in p] == want
        assert streamer.ended == 1
    assert no_reader_left()


@pytest.mark.parametrize("extra", [
    {"past_key_values": None}, {"return_dict_in_generate": True}, {"output_logits": True},
    {"pad_token_id": 0}, {"attention_mask": None}, {"num_beams": 2},
    {"num_return_sequences": 2, "do_sample": True},
])
def test_generate_arguments_percache_cannot_honour_are_named(extra: dict[str, object]) -> None:
    """They ended in "got multiple values" (a TypeError from generate), or, for more than one
    sequence, in a size mismatch in the cache update once K/V was reused."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    name = next(iter(extra))
    with pytest.raises(ValueError, match=f"^{name}"):
        pc.generate(SEGMENTS, max_new_tokens=2, **extra)
    assert pc.generate(SEGMENTS, max_new_tokens=2).stats.tokens_reused == 0  # nothing stored
    assert pc.generate(SEGMENTS, max_new_tokens=2).stats.tokens_reused > 0
    pc.close()
