"""The RAM tier over a store held in memory (``store=None``) holds no second copy of its nodes.

The store keeps every node's tensors in RAM already; a tier copying them would hold each node
twice, up to ``ram_cache_bytes``. Instead it serves the store's own tensors (``shared``), which
no request may mutate: after requests of every kind, every node equals, byte for byte, what it
was when first seen, and the replies equal those of the same requests with the tier off."""

from __future__ import annotations

from typing import Any

import torch

from percache_plugin.bench.held import HeldChunks
from percache_plugin.buffer.plugin import RamTierKV
from tests.buffer.test_ram_tensors_untouched import every_kind, every_kind_handle


def _outcome(out: Any) -> tuple[Any, ...]:
    s = out.stats
    return (out.token_ids, s.tokens_reused, s.nodes_reused, s.approximate, s.tokens_shifted,
            s.tokens_accepted, getattr(s, "memory_spliced_tokens", 0), getattr(s, "blocks_reused", 0))


def _run(ram: int) -> tuple[list[tuple[Any, ...]], dict[str, float], int, int]:
    """Replies, the tier's stats, the bytes of loaded tensors alive after the requests that are
    not the store's own, and how many node snapshots were compared."""
    pc = every_kind_handle(None, ram)
    loads = HeldChunks()
    pc.plugins.register(loads)
    store = pc.engine.store
    first: dict[str, list[torch.Tensor]] = {}  # each node as first seen after a request
    seen: list[tuple[Any, ...]] = []
    compared = 0

    def record(out: Any) -> None:
        nonlocal compared
        seen.append(_outcome(out))
        for node in store.nodes():
            kv = store.get(node.key)  # a copy of what the store holds now
            assert kv is not None
            now = [t.clone() for t in (*kv.keys, *kv.values)]
            if node.key not in first:
                first[node.key] = now
                continue
            for a, b in zip(first[node.key], now, strict=True):
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), node.key
            compared += 1

    every_kind(pc, record)
    own = set()
    for node in store.nodes():
        kv = store.get(node.key, shared=True)
        assert kv is not None
        own.update(t.untyped_storage().data_ptr() for t in (*kv.keys, *kv.values))
    extra = loads.alive_bytes(besides=own)
    stats = next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV)).ram_tier_stats()
    pc.close()
    return seen, stats, extra, compared


def test_the_tier_over_an_in_memory_store_holds_no_copy_and_changes_nothing() -> None:
    with_ram, stats, extra, compared = _run(1 << 24)
    without, _, _, _ = _run(0)
    assert with_ram == without
    assert compared > 0
    print(f"tier over an in-memory store: {extra} bytes held besides the store's own, {stats}")
    assert extra == 0, f"{extra} bytes of loaded K/V held besides the store's own"
    assert stats["bytes"] == 0 and stats["misses"] == 0, stats
    assert stats["shared"] == stats["hits"] > 0, stats
