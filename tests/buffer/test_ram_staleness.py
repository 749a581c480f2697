"""The RAM tier never serves K/V the store no longer holds, nor K/V of other weights.

Its check is the row's version (creation time, token hash, size), not the checksum: these tests
change the store behind its back (another process, another handle in this process, other
weights in use) and compare what a handle with the tier gives against the same requests with
``ram_cache_bytes=0`` and against a fresh handle."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from percache_plugin.buffer.plugin import RamTierKV
from percache_plugin.buffer.ram_tier import KVRamTier
from percache_plugin.kv.store import KVStore
from tests.buffer.test_ram_tier import IDS, chunk
from tests.helpers import SEGMENTS, tiny_pair

GEN = {"max_new_tokens": 5, "do_sample": False}
ASK_OTHER = [*SEGMENTS[:-1], "Who brings the projector?"]

_OTHER_PROCESS = """
import sys, torch
from percache_plugin.kv.store import ChunkKV, KVStore
ids = (1, 2, 3, 4)
def chunk(v):
    t = torch.full((2, 4, 8), v)
    return ChunkKV((t.clone(), t.clone()), (t.clone(), t.clone()))
store = KVStore(sys.argv[1], fingerprint="fp")
step = sys.argv[2]
if step == "rewrite":  # same key, same size, same tokens, other tensors
    store.delete("a")
    store.put("a", chunk(2.0), parent=None, start=0, token_ids=ids)
    store.delete("c")
    store.set_byte_limit(store.total_bytes() - 1)  # evicts one leaf by the byte limit
    store.set_byte_limit(None)
else:  # wiped and rebuilt: every node again, other tensors
    for n in store.nodes():
        store.delete(n.key)
    for i, key in enumerate("abcd"):
        store.put(key, chunk(10.0 + i), parent=None, start=0, token_ids=ids)
store.close()
"""


def _in_other_process(path: Path, step: str) -> None:
    subprocess.run([sys.executable, "-c", textwrap.dedent(_OTHER_PROCESS), str(path), step],
                   check=True, timeout=120, cwd=Path(__file__).parents[2])


def _value(tier: KVRamTier, key: str) -> float | None:
    kv = tier.get(key, IDS)
    return None if kv is None else float(kv.keys[0][0, 0, 0])


def test_another_process_rewriting_evicting_and_rebuilding_the_store(tmp_path: Path) -> None:
    store = KVStore(tmp_path, fingerprint="fp")
    for i, key in enumerate("abcd"):
        store.put(key, chunk(1.0 + i), parent=None, start=0, token_ids=IDS)
    tier = KVRamTier(store, 1 << 20, "lru")
    for _ in range(2):
        assert [_value(tier, k) for k in "abcd"] == [1.0, 2.0, 3.0, 4.0]
    assert tier.stats.hits == 4
    _in_other_process(tmp_path, "rewrite")
    left = {n.key for n in store.nodes()}
    assert "c" not in left and len(left) == 2  # c removed, one of a, b, d evicted there
    now = {"a": 2.0, "b": 2.0, "d": 4.0}
    assert {k: _value(tier, k) for k in "abcd"} == {k: now[k] if k in left else None for k in "abcd"}
    assert tier.stats.hits == 4 + len(left - {"a"})  # only the nodes left as they were
    hits = tier.stats.hits
    _in_other_process(tmp_path, "wipe")
    assert [_value(tier, k) for k in "abcd"] == [10.0, 11.0, 12.0, 13.0]
    assert tier.stats.hits == hits  # nothing held was served after the rebuild
    store.close()


def _tier_stats(pc: Any) -> dict[str, float]:
    return next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV)).ram_tier_stats()


def _scenario(path: Path, ram: int) -> list[tuple[Any, ...]]:
    """Handle ``a`` (RAM tier of ``ram`` bytes) serves requests while handle ``b`` (other model
    object, same weights) evicts, rounds and rebuilds the same store; what ``a`` gave each time."""
    model_a, tok = tiny_pair("llama", initializer_range=0.5)
    model_b, _ = tiny_pair("llama", initializer_range=0.5)
    a = percache.enable(model_a, tok, store=path, ram_cache_bytes=ram)
    b = percache.enable(model_b, tok, store=path, ram_cache_bytes=0)
    assert a.fingerprint == b.fingerprint
    seen: list[tuple[Any, ...]] = []

    def ask(segments: list[str]) -> None:
        g = a.generate(segments, **GEN)
        s = g.stats
        seen.append((g.token_ids, s.tokens_reused, s.nodes_reused, s.approximate, s.tokens_computed))

    for segments in (SEGMENTS, ASK_OTHER, SEGMENTS, ASK_OTHER, SEGMENTS):
        ask(segments)
    b.configure(kv_byte_limit=1)  # the other handle's byte limit evicts every node
    b.configure(kv_byte_limit=None)
    ask(SEGMENTS)
    ask(SEGMENTS)
    b.configure(kv_byte_limit=1, storage_dtype="bfloat16")  # rebuilt, rounded
    b.configure(kv_byte_limit=None)
    b.generate(SEGMENTS, **GEN)
    ask(SEGMENTS)  # a keeps K/V exact: the rounded nodes are a miss (and replaced)
    ask(SEGMENTS)
    b.configure(kv_byte_limit=1, storage_dtype=None)  # rebuilt exactly: same keys, new rows
    b.configure(kv_byte_limit=None)
    b.generate(ASK_OTHER, **GEN)
    ask(ASK_OTHER)
    ask(SEGMENTS)
    if ram:
        stats = _tier_stats(a)
        assert stats["hits"] > 0 and stats["stale"] > 0  # rows rebuilt under the held copies
    a.close()
    b.close()
    return seen


def test_another_handle_evicting_rounding_and_rebuilding(tmp_path: Path) -> None:
    with_ram = _scenario(tmp_path / "ram", 1 << 24)
    without = _scenario(tmp_path / "disk", 0)
    assert with_ram == without
    assert not any(approx for *_, approx, _ in with_ram)
    model, tok = tiny_pair("llama", initializer_range=0.5)
    fresh = percache.enable(model, tok, store=tmp_path / "ram", ram_cache_bytes=1 << 24)
    with fresh.disabled():
        plain = {i: fresh.generate(s, **GEN).token_ids for i, s in enumerate((SEGMENTS, ASK_OTHER))}
    assert [g[0] for g in with_ram] == [plain[0], plain[1], plain[0], plain[1], plain[0], plain[0],
                                        plain[0], plain[0], plain[0], plain[1], plain[0]]
    assert fresh.generate(SEGMENTS, **GEN).token_ids == plain[0]
    fresh.close()


SECRET = {"text": "Zorblax: the quartz locker opens with code 4417, every second Tuesday.", "id": "zz"}
REPLACED = {"text": "Nothing is stored in the quartz locker any more, says Zorblax.", "id": "zz"}
BEN = {"text": "Ben: the budget review is on Monday; travel costs are over plan.", "id": "ben"}
LOCKER = "When does the quartz locker open?"


def _removals(path: Path, ram: int) -> list[tuple[Any, ...]]:
    """Handle ``a`` (RAM tier of ``ram`` bytes) answers and chats while handle ``b`` on the same
    store removes the document, adds its id again with another text and deletes a session."""
    def handle(seed_model: Any) -> Any:
        model, tok = seed_model
        return percache.enable(model, tok, store=path, embedder="hash", predict="off", kv_warm=False,
                               answer_grounding=False, draft_calibrate_idle=False, use_qa_bank=False,
                               prefix_block_tokens=16, ram_cache_bytes=ram)

    a = handle(tiny_pair("llama", initializer_range=0.5))
    b = handle(tiny_pair("llama", initializer_range=0.5))
    seen: list[tuple[Any, ...]] = []

    def record(out: Any) -> None:
        s = out.stats
        seen.append((out.text, getattr(out, "sources", ()), s.tokens_reused, s.nodes_reused, s.approximate,
                     getattr(s, "blocks_reused", 0)))

    a.add_documents([SECRET, BEN], scope="me")
    for _ in range(3):
        record(a.ask(LOCKER, scope="me", max_new_tokens=5))
    b.knowledge.remove_document("zz", "me")  # its chunk's K/V goes from the store
    record(a.ask(LOCKER, scope="me", max_new_tokens=5))
    b.add_documents([REPLACED], scope="me")  # the id again, another text
    for _ in range(2):
        record(a.ask(LOCKER, scope="me", max_new_tokens=5))
    for name in ("s", "t"):  # t's head continues s's blocks
        a.sessions.create(name, system="Be brief and kind, answer in one line.")
        record(a.chat("Who owns the slides?", session=name, max_new_tokens=4))
    b.sessions.delete("s")  # its blocks go from the store
    a.sessions.create("u", system="Be brief and kind, answer in one line.")
    record(a.chat("Who owns the slides?", session="u", max_new_tokens=4))
    a.close()
    b.close()
    return seen


def test_another_handle_removing_replacing_and_deleting(tmp_path: Path) -> None:
    with_ram = _removals(tmp_path / "ram", 1 << 24)
    assert with_ram == _removals(tmp_path / "disk", 0)
    assert with_ram[3][1] != with_ram[2][1]  # the removal was seen: other sources
    assert any(r[5] for r in with_ram[6:8]), "no session was extended from stored blocks"


FACTS = ["Ana drinks Quillberry tea every morning", "Ana keeps a Quillberry plant on her desk"]


def _forgets(path: Path, ram: int) -> list[tuple[Any, ...]]:
    """Handle ``a`` (RAM tier of ``ram`` bytes) splices memory facts' K/V into new sessions while
    handle ``b`` on the same store forgets one of them."""
    config = {"store": path, "embedder": "hash", "predict": "off", "kv_warm": False, "memory_recall": True,
              "memory_threshold": 0.0, "memory_recall_mode": "splice", "session_blocks": False,
              "draft_calibrate_idle": False, "ram_cache_bytes": ram}
    model, tok = tiny_pair("llama", initializer_range=0.5)
    a = percache.enable(model, tok, **config)
    ids = [a.memory.add(f, scope="ana").fact.id for f in FACTS]
    model_b, _ = tiny_pair("llama", initializer_range=0.5)
    b = percache.enable(model_b, tok, **{**config, "ram_cache_bytes": 0})
    seen: list[tuple[Any, ...]] = []
    for i, name in enumerate(("s", "t", "u", "v")):
        if i == 3:
            b.memory.forget(ids[0])  # its K/V goes from the store
        a.sessions.create(name, system="Be brief.")
        r = a.chat("What Quillberry things does Ana have?", session=name, memory_scope="ana", max_new_tokens=4)
        s = r.stats
        seen.append((r.token_ids, tuple(ids.index(f) for f in s.fact_ids if f in ids), s.memory_spliced_tokens, s.memory_facts_stored,
                     s.tokens_reused, s.approximate))
    a.close()
    b.close()
    return seen


def test_another_handle_forgetting_a_spliced_fact(tmp_path: Path) -> None:
    with_ram = _forgets(tmp_path / "ram", 1 << 24)
    assert with_ram == _forgets(tmp_path / "disk", 0)
    assert with_ram[2][2] > 0  # spliced from stored K/V (from RAM, with the tier)
    assert with_ram[3][2] < with_ram[2][2] or with_ram[3][1] != with_ram[2][1]  # the forget was seen


peft = pytest.importorskip("peft")


def test_alternating_weights_are_served_from_ram_each_their_own(tmp_path: Path) -> None:
    """Adapters switched, disabled, a weight edited in place: RAM entries of other weights are
    never served, and those of weights in use again are (the tier was emptied at each change)."""
    from tests.fingerprint.test_follows_model import lora

    model, tok = tiny_pair("llama")
    model = lora(lora(model, "x", 1), "y", 2)
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=1 << 24)

    def check(label: str) -> int:
        got = pc.generate(SEGMENTS, **GEN)
        with pc.disabled():
            assert got.token_ids == pc.generate(SEGMENTS, **GEN).token_ids, label
        assert not got.stats.approximate
        return got.stats.ram_hits

    layer = model.base_model.model.model.layers[1].mlp.down_proj
    saved = layer.weight.detach().clone()
    hits: dict[str, list[int]] = {}
    for _ in range(3):
        for name in ("x", "y", "base", "edited"):
            if name in ("x", "y"):
                model.set_adapter(name)
                hits.setdefault(name, []).append(check(name))
                continue
            with model.disable_adapter():
                if name == "edited":
                    with torch.no_grad():
                        layer.weight.add_(0.5)
                hits.setdefault(name, []).append(check(name))
                with torch.no_grad():
                    layer.weight.copy_(saved)
    # first round: computed; second: read from the store into RAM; third: served from RAM
    assert all(h[0] == h[1] == 0 and h[2] > 0 for h in hits.values()), hits
    pc.close()
