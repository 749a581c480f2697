"""Building a request's cache from loaded chunks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import percache_plugin as percache
from percache_plugin.kv.chunk import ChunkKV
from percache_plugin.reuse import ReuseRunner
from percache_plugin.segments import Prompt, PromptPiece, Segment
from percache_plugin.stats import GenerationStats
from tests.helpers import SEGMENTS, tiny_pair


def test_fully_cached_prompt_keeps_its_last_token_uncached() -> None:
    # A plugin's plan may serve every position (e.g. a prompt-building hook that keys the last
    # piece too); generate() would re-feed such a prompt, so the cache must end one token early.
    model, _ = tiny_pair("llama")
    cfg = model.config
    kv_heads = cfg.num_key_value_heads
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    n = 7
    layer = torch.randn(kv_heads, n, head_dim)
    chunk = ChunkKV(tuple(layer.clone() for _ in range(cfg.num_hidden_layers)),
                    tuple(layer.clone() for _ in range(cfg.num_hidden_layers)))
    piece = PromptPiece(Segment("x", "chunk"), tuple(range(10, 10 + n)), 0, "k")
    stats = GenerationStats(prompt_tokens=n)
    ctx = SimpleNamespace(hooks=SimpleNamespace(join_buffers=lambda ctx: None))  # no plugins
    cache, served, nodes = ReuseRunner(model, ctx, None).exact_cache(  # type: ignore[arg-type]
        Prompt((piece,)), [chunk], stats)
    assert (served, nodes, stats.tokens_reused) == (n - 1, 1, n - 1)
    assert cache.get_seq_length() == n - 1


class _Order:
    """Records prefetches and loads, in order, and leaves both to the built-ins."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    @percache.hookimpl(tryfirst=True)
    def percache_prefetch_chunks(self, ctx, keys):  # type: ignore[no-untyped-def]
        self.calls.append(("prefetch", tuple(keys)))

    @percache.hookimpl(tryfirst=True)
    def percache_load_chunk(self, ctx, key, token_ids):  # type: ignore[no-untyped-def]
        self.calls.append(("load", (key,)))


def test_a_cached_request_prefetches_its_planned_nodes_before_loading_them(tmp_path) -> None:
    model, tok = tiny_pair("llama")
    order = _Order()
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=0, plugins=[order],
                         kv_prefetch=True)
    pc.generate(SEGMENTS, max_new_tokens=1)
    order.calls.clear()
    g = pc.generate(SEGMENTS, max_new_tokens=1)
    loads = [keys[0] for what, keys in order.calls if what == "load"]
    assert g.stats.nodes_reused == len(loads) > 0
    assert order.calls[0] == ("prefetch", tuple(loads))
    pc.configure(kv_prefetch=False)  # Config.kv_prefetch off (the default): no prefetch
    order.calls.clear()
    pc.generate(SEGMENTS, max_new_tokens=1)
    pc.close()
    assert [what for what, _ in order.calls] == ["load"] * len(loads)


def test_a_cached_generate_joins_each_layer_in_its_first_forward(tmp_path, monkeypatch) -> None:
    # The chunks are concatenated by the first forward with its new tokens (one copy), not read
    # out beforehand by generate() or percache (which would make a second copy of every layer).
    from percache_plugin.kv.cache import DeferredLayer

    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=0)
    first = pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False)
    joins: list[bool] = []
    join = DeferredLayer._join
    monkeypatch.setattr(DeferredLayer, "_join",
                        lambda self, extra=None: joins.append(extra is not None) or join(self, extra))
    again = pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False)
    pc.close()
    assert again.stats.tokens_reused > 0 and again.text == first.text
    assert joins == [True] * model.config.num_hidden_layers


def test_a_splice_forward_runs_no_lm_head() -> None:
    # the splice forward only fills the cache; the lm head over its positions was waste
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, reuse="shifted", recompute="all")
    pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False)
    heads: list[int] = []

    def spy(module, args, output):  # type: ignore[no-untyped-def]
        if pc.engine.active_splice is not None:
            heads.append(args[0].shape[1])  # the positions the lm head ran over

    handle = model.get_output_embeddings().register_forward_hook(spy)
    moved = [SEGMENTS[0], SEGMENTS[3], SEGMENTS[2], SEGMENTS[1], SEGMENTS[4]]
    spliced = pc.generate(moved, max_new_tokens=4, do_sample=False)
    handle.remove()
    assert spliced.stats.tokens_recomputed > 0 and heads == []
    pc.configure(use_kv=False)  # every position recomputed: the same answer as no reuse
    assert spliced.text == pc.generate(moved, max_new_tokens=4, do_sample=False).text


def _lossy_store(path, family: str) -> None:
    """A store whose K/V a handle with storage_dtype='float16' wrote (rounded)."""
    model, tok = tiny_pair(family)
    lossy = percache.enable(model, tok, store=path, storage_dtype="float16")
    lossy.generate(SEGMENTS, max_new_tokens=4)
    assert lossy.generate(SEGMENTS, max_new_tokens=4).stats.approximate  # it says so itself
    lossy.close()


@pytest.mark.parametrize("ram", [0, 1 << 20])
def test_kv_stored_at_lower_precision_is_a_miss_for_a_handle_that_stores_exact(tmp_path, ram: int) -> None:
    # storage_dtype=None promises bit-exact reuse: another handle's rounded K/V is recomputed
    # (and replaced), never served, through the RAM tier too.
    _lossy_store(tmp_path / "s", "llama")
    model, tok = tiny_pair("llama")
    exact = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=ram)
    first = exact.generate(SEGMENTS, max_new_tokens=4)
    assert not first.stats.approximate and first.stats.tokens_reused == 0
    again = exact.generate(SEGMENTS, max_new_tokens=4)  # the recomputed K/V took the rounded's place
    assert not again.stats.approximate and again.stats.tokens_reused > 0
    with exact.disabled():
        plain = exact.generate(SEGMENTS, max_new_tokens=4)
    assert first.token_ids == again.token_ids == plain.token_ids
    exact.close()


def test_kv_stored_at_lower_precision_is_not_shifted_into_an_exact_precision_handle(tmp_path) -> None:
    _lossy_store(tmp_path / "s", "mistral")
    model, tok = tiny_pair("mistral")
    pc = percache.enable(model, tok, store=tmp_path / "s", reuse="shifted")
    other_order = [SEGMENTS[0], SEGMENTS[2], SEGMENTS[1], *SEGMENTS[3:]]
    g = pc.generate(other_order, max_new_tokens=4)
    assert not g.stats.approximate and g.stats.tokens_shifted == 0
    pc.close()
