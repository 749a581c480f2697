"""A handle over a model whose layers percache's weight buffer serves from disk
(:func:`~percache_plugin.buffer.offload.dispatch_buffered`) answers as accelerate's plain disk
offload does, RAM tier on, also after the weight files change on disk between requests and
between runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.buffer.offload import BufferedWeights, dispatch_buffered
from tests.fingerprint.test_offloaded import DEVICE_MAP, _offloaded, _pair
from tests.helpers import SEGMENTS

accelerate = pytest.importorskip("accelerate")

GEN = {"max_new_tokens": 6, "do_sample": False}
ASK_OTHER = [*SEGMENTS[:-1], "Who brings the projector?"]


def _write_layers(folder: Path, seed: int) -> None:
    from accelerate.utils import offload_state_dict

    model, _ = _pair(seed)
    offload_state_dict(str(folder), {k: v for k, v in model.state_dict().items() if k.startswith("model.layers.")})


def _buffered(folder: Path, share: float) -> tuple[Any, Any, BufferedWeights]:
    """The layers of seed 1 on disk in ``folder``, served through a buffer of ``share`` of them."""
    _write_layers(folder, 1)
    model, tok = _pair(1)
    total = sum(p.stat().st_size for p in folder.glob("*.dat"))
    weights = BufferedWeights(folder, int(total * share), "llm")
    return dispatch_buffered(model, DEVICE_MAP, weights), tok, weights


def _plain(seed: int, folder: Path) -> dict[int, list[int]]:
    """Greedy tokens of accelerate's own disk offload (``dispatch_model``), no percache."""
    model, tok = _offloaded(seed, folder)
    pc = percache.enable(model, tok)
    with pc.disabled():
        out = {i: pc.generate(s, **GEN).token_ids for i, s in enumerate((SEGMENTS, ASK_OTHER))}
    pc.close()
    return out


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_buffered_offload_answers_as_accelerate_and_follows_a_rewritten_file(tmp_path: Path, share: float) -> None:
    want = {seed: _plain(seed, tmp_path / f"plain{seed}") for seed in (1, 2)}
    assert want[1] != want[2]  # the layers tell apart
    model, tok, weights = _buffered(tmp_path / "w", share)
    pc = percache.enable(model, tok, store=tmp_path / "store", ram_cache_bytes=1 << 24)
    for i in (0, 1, 0, 1, 0):  # computed, read from the store, served from RAM
        assert pc.generate((SEGMENTS, ASK_OTHER)[i], **GEN).token_ids == want[1][i]
    assert weights.bytes_read > 0 and weights.cache.used <= weights.cache.capacity
    before = pc.fingerprint
    _write_layers(tmp_path / "w", 2)  # another model's layers, between two requests
    got = pc.generate(SEGMENTS, **GEN)
    assert got.token_ids == want[2][0] and got.stats.tokens_reused == 0 and got.stats.ram_hits == 0
    assert pc.fingerprint != before and weights.stale > 0
    assert pc.generate(ASK_OTHER, **GEN).token_ids == want[2][1]
    pc.close()
    _write_layers(tmp_path / "w", 1)  # between runs: back to the first layers
    model, tok, _ = _buffered(tmp_path / "w", share)
    pc = percache.enable(model, tok, store=tmp_path / "store", ram_cache_bytes=1 << 24)
    assert pc.fingerprint == before
    again = pc.generate(SEGMENTS, **GEN)
    assert again.token_ids == want[1][0] and again.stats.tokens_reused > 0  # its own K/V, kept
    pc.close()
