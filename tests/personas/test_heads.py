"""Head snapshots: keyed by fingerprint and head ids; a corrupt or missing file is a miss."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest
import torch

import percache_plugin as percache
from percache_plugin.personas.heads import HEADS_DIR, HeadSnapshots
from percache_plugin.session.persist import SESSIONS_DB
from tests.helpers import tiny_pair


def _kv(seed: int, n: int = 5) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, n, 4, generator=g), torch.randn(2, n, 4, generator=g)) for _ in range(3)]


@pytest.mark.parametrize("on_disk", [True, False])
def test_served_only_to_the_same_fingerprint_and_ids(tmp_path: Path, on_disk: bool) -> None:
    heads = HeadSnapshots(tmp_path if on_disk else None, tmp_path / "db.sqlite" if on_disk else None)
    ids = [1, 2, 3, 4, 5]
    kv = _kv(0)
    heads.put("fp-a", ids, kv)
    got = heads.get("fp-a", ids)
    assert got is not None
    for (k, v), (k2, v2) in zip(kv, got, strict=True):
        assert torch.equal(k, k2) and torch.equal(v, v2)
    assert heads.get("fp-b", ids) is None  # another adapter or model
    assert heads.get("fp-a", [1, 2, 3, 4, 6]) is None  # another prompt
    heads.close()


def test_a_corrupt_or_missing_file_is_a_miss_and_files_are_owner_only(tmp_path: Path) -> None:
    heads = HeadSnapshots(tmp_path, tmp_path / "db.sqlite")
    ids = [1, 2, 3, 4, 5]
    heads.put("fp-a", ids, _kv(0))
    (path,) = (tmp_path / HEADS_DIR).rglob("*.safetensors")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = bytearray(path.read_bytes())
    data[-8:] = b"\xff" * 8  # a flipped tensor tail: the checksum no longer matches
    path.write_bytes(bytes(data))
    assert heads.get("fp-a", ids) is None
    path.unlink()
    assert heads.get("fp-a", ids) is None
    heads.put("fp-a", ids, _kv(1))  # stored again after a miss
    assert heads.get("fp-a", ids) is not None
    heads.close()


@pytest.mark.parametrize("layout", ["not json", "[1, 2]", '[["k.0", "torch.float32"]]', "null"])
def test_a_corrupt_layout_row_is_a_miss(tmp_path: Path, layout: str) -> None:
    """A snapshot row whose layout is not the JSON written is a miss (it raised out of the
    chat turn that switched to the persona); the head is stored again over it."""
    heads = HeadSnapshots(tmp_path, tmp_path / "db.sqlite")
    ids = [1, 2, 3, 4, 5]
    heads.put("fp-a", ids, _kv(0))
    assert heads.db is not None
    with heads.db:
        heads.db.execute("UPDATE persona_heads SET layout = ?", (layout,))
    assert heads.get("fp-a", ids) is None
    heads.put("fp-a", ids, _kv(1))
    assert heads.get("fp-a", ids) is not None
    heads.close()


def test_a_persona_turn_over_a_corrupt_layout_row_prefills_the_head(tmp_path: Path) -> None:
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path, embedder="hash", predict="off", session_blocks=False)
    pc.personas.add("p", "You are a terse pirate.")
    pc.sessions.create("a")
    assert pc.chat("Hello.", session="a", persona="p", max_new_tokens=2).stats.persona_head == "stored"
    pc.close()
    db = sqlite3.connect(tmp_path / SESSIONS_DB)
    with db:
        db.execute("UPDATE persona_heads SET layout = 'not json'")
    db.close()
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path, embedder="hash", predict="off", session_blocks=False)
    pc.sessions.create("b")
    assert pc.chat("Hello.", session="b", persona="p", max_new_tokens=2).stats.persona_head == "stored"
    assert pc.chat("Hi.", session="b", persona="p", max_new_tokens=2).stats.persona_head == "session"
    pc.close()
