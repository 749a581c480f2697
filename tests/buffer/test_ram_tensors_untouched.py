"""No request writes into the tensors the RAM tier holds and hands out.

A hit hands the tier's own tensors to the request (no copy). After requests of every kind
(exact reuse, shifted reuse with its RoPE shift, session turns extended from stored blocks,
memory facts spliced into a session's region, drafted decoding whose drafts are rejected) every
entry the tier holds must equal, byte for byte, the node read afresh from the store; and the
same requests with ``ram_cache_bytes=0`` give the same tokens and flags."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import percache_plugin as percache
from percache_plugin.buffer.plugin import RamTierKV
from percache_plugin.kv.store import KVStore
from tests.helpers import SEGMENTS, tiny_pair

GEN = {"max_new_tokens": 6, "do_sample": False}
SHIFTED = [SEGMENTS[0], SEGMENTS[2], SEGMENTS[1], SEGMENTS[3], SEGMENTS[4]]  # chunks at other places
FACTS = ["Ana drinks Quillberry tea every morning", "Ana keeps a Quillberry plant on her desk"]
ASK = "What Quillberry things does Ana have?"


def _check_held(pc: Any, path: Path, fresh: dict[str, KVStore]) -> int:
    """Compare every entry the tier holds with its node read from the store by another store
    object; returns how many were compared."""
    plugin = next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV))
    if plugin.tier is None:
        return 0
    compared = 0
    for fp in {pc.engine.store.fingerprint}:
        store = fresh.setdefault(fp, KVStore(path, fingerprint=fp))
        for node in store.nodes():
            held = plugin.tier.cache.peek((fp, node.key))
            if held is None:
                continue
            disk = store.get(node.key)
            assert disk is not None
            for a, b in zip((*held.kv.keys, *held.kv.values), (*disk.keys, *disk.values), strict=True):
                assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8)), node.key
            compared += 1
    return compared


def every_kind_handle(store: Path | None, ram: int) -> Any:
    """A handle for :func:`every_kind`: shifted reuse, facts spliced, 16-token prefix blocks."""
    model, tok = tiny_pair("llama", initializer_range=0.5)
    pc = percache.enable(model, tok, store=store, ram_cache_bytes=ram, reuse="shifted", embedder="hash",
                         predict="off", memory_recall=True, memory_threshold=0.0,
                         memory_recall_mode="splice", prefix_block_tokens=16)
    for fact in FACTS:
        pc.memory.add(fact, scope="ana")
    return pc


def every_kind(pc: Any, record: Callable[[Any], None]) -> None:
    """Requests of every kind, each reply passed to ``record``: exact and shifted reuse, drafts,
    session turns extended from stored blocks with memory facts spliced."""
    for segments in (SEGMENTS, SEGMENTS, SEGMENTS, SHIFTED, SHIFTED, SHIFTED, SEGMENTS):
        record(pc.generate(segments, **GEN))  # exact, then shifted chunks from RAM
    record(pc.generate(SEGMENTS, max_new_tokens=16, do_sample=False, prediction=SEGMENTS[2]))  # drafts
    for name in ("a", "b", "c", "d"):  # each session: the same head, the blocks stored before
        pc.sessions.create(name, system="Be brief, be kind, be exact, be quick.")
        record(pc.chat(ASK, session=name, memory_scope="ana", max_new_tokens=4))
        record(pc.chat("And who else?", session=name, memory_scope="ana", max_new_tokens=4))


def _requests(path: Path, ram: int) -> tuple[list[tuple[Any, ...]], int, int]:
    pc = every_kind_handle(path, ram)
    fresh: dict[str, KVStore] = {}
    seen: list[tuple[Any, ...]] = []
    served: list[int] = []  # the request's stats.ram_hits (not compared: 0 without the tier)
    tier_hits: list[int] = []  # the tier's count of hits after each request
    compared = 0

    def record(out: Any) -> None:
        nonlocal compared
        s = out.stats
        seen.append((out.token_ids, s.tokens_reused, s.nodes_reused, s.approximate, s.tokens_shifted,
                     s.tokens_accepted, s.tokens_drafted, getattr(s, "memory_spliced_tokens", 0),
                     getattr(s, "blocks_reused", 0)))
        served.append(s.ram_hits)
        plugin = next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV))
        tier_hits.append(int(plugin.ram_tier_stats().get("hits", 0)))
        if ram:
            compared += _check_held(pc, path, fresh)

    every_kind(pc, record)
    pc.close()
    for store in fresh.values():
        store.close()
    return seen, compared, [(n, b - a) for n, a, b in zip(served, [0, *tier_hits], tier_hits, strict=False)]


def test_requests_of_every_kind_leave_the_tiers_tensors_as_stored(tmp_path: Path) -> None:
    with_ram, compared, served = _requests(tmp_path / "ram", 1 << 24)
    without, _, none = _requests(tmp_path / "disk", 0)
    assert with_ram == without and not any(n or t for n, t in none)
    assert compared > 0
    # every node the tier served is counted in its request's stats, session turns included
    assert all(n == t for n, t in served), served
    assert sum(n for n, _ in served[8:]) > 0, "no session turn was served from RAM"
    shifted = [r for r in with_ram[3:6] if r[4] > 0]
    assert shifted, "no request reused a chunk at another position"
    assert with_ram[7][6] > 0, "no draft was verified"
    assert any(r[7] > 0 for r in with_ram[8:]), "no memory fact was spliced"
    assert any(r[8] > 0 for r in with_ram[8:]), "no session was extended from stored blocks"
