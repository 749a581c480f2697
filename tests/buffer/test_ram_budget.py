"""``ram_cache_bytes`` is a bound on the chunk tensors the RAM tier holds between requests.

The bytes are measured, not read from the tier's own counter: every tensor a load returns is
followed by a weak reference (``HeldChunks``), and after a request the tensors still alive are
what someone still holds; with no cache kept by the caller, that is the tier.
Chunks read layer by layer in the background (``Config.kv_overlap_reads``) were once kept
outside the budget until the next request, whatever their size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.bench.held import HeldChunks
from percache_plugin.buffer.plugin import RamTierKV
from tests.helpers import SEGMENTS, tiny_pair

GEN = {"max_new_tokens": 4, "do_sample": False}
ASK_OTHER = [*SEGMENTS[:-1], "Who brings the projector?"]


def _tier(pc: Any) -> RamTierKV:
    return next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV))


@pytest.mark.parametrize("overlap", [True, False])
def test_chunks_larger_than_the_budget_are_not_held(tmp_path: Path, overlap: bool) -> None:
    model, tok = tiny_pair("llama", initializer_range=0.5)
    loads = HeldChunks()
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=1000, kv_overlap_reads=overlap,
                         plugins=[loads])
    with pc.disabled():
        want = pc.generate(SEGMENTS, **GEN).token_ids
    assert pc.generate(SEGMENTS, **GEN).token_ids == want  # computes, stores
    for _ in range(2):
        got = pc.generate(SEGMENTS, **GEN)
        assert got.token_ids == want and got.stats.ram_misses > 0 and got.stats.ram_hits == 0
        del got
        assert loads.alive_bytes() == 0  # every chunk is over 1000 bytes: none may stay
    stats = _tier(pc).ram_tier_stats()
    assert stats["bytes"] == 0 and stats["misses"] == stats["bypassed"] > 0
    pc.close()


def test_what_stays_between_requests_is_within_the_budget_and_is_served(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama", initializer_range=0.5)
    loads = HeldChunks()
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=1 << 24, plugins=[loads])
    want = {}
    with pc.disabled():
        for i, s in enumerate((SEGMENTS, ASK_OTHER)):
            want[i] = pc.generate(s, **GEN).token_ids
    for i, s in enumerate((SEGMENTS, ASK_OTHER)):
        assert pc.generate(s, **GEN).token_ids == want[i]
    nodes = {n.key: n.nbytes for n in pc.engine.store.nodes()}
    budget = max(nodes.values()) + min(nodes.values())  # room for some nodes, not all
    assert budget < sum(nodes.values())
    pc.configure(ram_cache_bytes=budget)
    hits = 0
    for i, s in ((0, SEGMENTS), (1, ASK_OTHER), (0, SEGMENTS), (0, SEGMENTS)):
        got = pc.generate(s, **GEN)
        assert got.token_ids == want[i]
        hits += got.stats.ram_hits
        del got
        held = _tier(pc).ram_tier_stats()["bytes"]
        assert loads.alive_bytes() == held <= budget
    assert hits > 0  # chunks read in the background were kept after all, within the budget
    pc.close()


def test_the_budget_changed_at_run_time(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama", initializer_range=0.5)
    loads = HeldChunks()
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=1 << 24, plugins=[loads])
    with pc.disabled():
        want = pc.generate(SEGMENTS, **GEN).token_ids
    for _ in range(3):  # computed, read from the store, served from RAM
        assert pc.generate(SEGMENTS, **GEN).token_ids == want
    tier = _tier(pc)
    assert tier.ram_tier_stats()["bytes"] > 0
    pc.configure(ram_cache_bytes=1000)  # smaller than any node: the next request holds none
    got = pc.generate(SEGMENTS, **GEN)
    assert got.token_ids == want and got.stats.ram_hits == 0
    del got
    assert tier.ram_tier_stats()["bytes"] == 0 and loads.alive_bytes() == 0
    pc.configure(ram_cache_bytes=0)  # off: nothing held, no join buffers
    got = pc.generate(SEGMENTS, **GEN)
    assert got.token_ids == want and (got.stats.ram_hits, got.stats.ram_misses) == (0, 0)
    assert tier.ram_tier_stats() == {} and tier.joins is None
    pc.configure(ram_cache_bytes=1 << 24)  # on again: filled anew
    assert [pc.generate(SEGMENTS, **GEN).stats.ram_hits for _ in range(2)][1] > 0
    pc.close()
