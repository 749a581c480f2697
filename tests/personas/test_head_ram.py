"""Persona head snapshots are read through the RAM tier: a switch back to a persona takes its
head's K/V from RAM (no file read, no checksum), never a snapshot the store no longer holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import percache_plugin as percache
from percache_plugin.buffer.plugin import RamTierKV
from percache_plugin.personas.heads import HeadSnapshots, head_key
from percache_plugin.session.persist import SESSIONS_DB
from tests.helpers import tiny_pair

PROMPTS = {"a": "You are a terse pirate.", "b": "You are a polite librarian."}
SWITCHES = ["a", "b", "a", "b"]


def _handle(store: Path, ram: int) -> Any:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=store, ram_cache_bytes=ram, embedder="hash", predict="off",
                         session_blocks=False)  # the tier then reads nothing but head snapshots
    for name, prompt in PROMPTS.items():
        pc.personas.add(name, prompt)
        pc.sessions.create(f"first-{name}")
        assert pc.chat("Hello.", session=f"first-{name}", persona=name, max_new_tokens=2).stats.persona_head == "stored"
    return pc


def _switches(pc: Any) -> list[tuple[Any, ...]]:
    """One session switching persona every turn: its cache dropped, the head from the snapshot."""
    pc.sessions.create("x")
    out = []
    for i, name in enumerate(SWITCHES):
        s = (reply := pc.chat(f"Turn {i}.", session="x", persona=name, max_new_tokens=3)).stats
        assert s.persona_head == "snapshot" and (i == 0 or s.persona_switched)
        out.append((reply.token_ids, s.ram_hits, s.ram_misses))
    return out


def test_a_persona_switch_reads_the_head_from_ram(tmp_path: Path) -> None:
    pc = _handle(tmp_path / "ram", 1 << 24)
    with_ram = _switches(pc)
    # each persona's first read misses (the file is read, checked, kept); every later switch hits
    assert [(h, m) for _, h, m in with_ram] == [(0, 1), (0, 1), (1, 0), (1, 0)]
    tier = next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV))
    assert tier.ram_tier_stats()["hits"] == 2
    off = _handle(tmp_path / "off", 0)
    assert [t for t, _, _ in _switches(off)] == [t for t, _, _ in with_ram]
    off.close()

    # What the tier holds and hands out is never written into: equal to the snapshot files.
    other = HeadSnapshots(tmp_path / "ram", tmp_path / "ram" / SESSIONS_DB)
    for prompt in PROMPTS.values():
        ids = pc.sessions.layout.head(prompt)[0]
        held = tier.tier.cache.peek(("head", f"{pc.engine.fingerprint}/{head_key(ids)}"))
        stored = other.get(pc.engine.fingerprint, ids)
        assert held is not None and stored is not None
        files = [k for k, _ in stored] + [v for _, v in stored]
        for a, b in zip((*held.kv.keys, *held.kv.values), files, strict=True):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))

    # Another handle replaces persona a's snapshot: the next switch reads the new one, not RAM.
    head = pc.sessions.layout.head(PROMPTS["a"])[0]
    old = other.get(pc.engine.fingerprint, head)
    assert old is not None
    new = [(k + 1.0, v - 1.0) for k, v in old]
    other.put(pc.engine.fingerprint, head, new)
    other.close()
    s = pc.chat("Again.", session="x", persona="a", max_new_tokens=1).stats
    assert (s.persona_head, s.ram_hits, s.ram_misses) == ("snapshot", 0, 1)
    assert tier.ram_tier_stats()["stale"] == 1
    n = len(head)
    for (k, v), layer in zip(new, pc.sessions.get("x").cache.layers, strict=True):
        assert torch.equal(layer.keys[0, :, :n], k) and torch.equal(layer.values[0, :, :n], v)
    pc.close()
