"""The RAM tier's join buffers never overwrite K/V that a live cache still reads.

The first forward over a cache built from RAM-tier chunks joins them into memory the tier lends
again to the next request once nothing else references it. These tests keep such a cache alive
the ways a caller can (a ``Prefilled`` used after later requests, a cropped view of one) and
check, bit for bit and by greedy tokens against plain generation, that later requests leave it
alone. The models use a wide weight init so that greedy tokens depend on the prompt (with the
default init a tiny random model often answers every prompt alike, and a stale cache would go
unnoticed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from percache_plugin.buffer.plugin import RamTierKV
from tests.helpers import SEGMENTS, tiny_pair

GEN = {"max_new_tokens": 6, "do_sample": False}
ASK_OTHER = [*SEGMENTS[:-1], "Who brings the projector?"]
LONG = [SEGMENTS[0], SEGMENTS[1] * 6, SEGMENTS[2], "When?"]


def _handle(family: str, path: Path) -> tuple[Any, Any]:
    model, tok = tiny_pair(family, initializer_range=0.5)
    return model, percache.enable(model, tok, store=path, ram_cache_bytes=1 << 24)


def _plain(pc: Any, segments: list[str]) -> list[int]:
    with pc.disabled():
        return pc.generate(segments, **GEN).token_ids  # type: ignore[no-any-return]


def _snapshot(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def _unchanged(cache: Any, snap: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    return all(torch.equal(layer.keys, k) and torch.equal(layer.values, v)
               for layer, (k, v) in zip(cache.layers, snap, strict=True))


def _continue(model: Any, prompt_ids: list[int], cache: Any) -> list[int]:
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                             pad_token_id=0, **GEN)
    return out[0, ids.shape[1]:].tolist()  # type: ignore[no-any-return]


def _joins(pc: Any) -> dict[str, float]:
    plugin = next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV))
    return plugin.ram_tier_stats()


@pytest.mark.parametrize("family", ["llama", "gemma2"])  # gemma2: sliding-window layers
def test_prefilled_cache_outlives_later_requests(tmp_path: Path, family: str) -> None:
    model, pc = _handle(family, tmp_path / "s")
    want = {i: _plain(pc, s) for i, s in enumerate((SEGMENTS, ASK_OTHER, LONG))}
    assert want[0] != want[1]  # the prompts tell apart: a stale cache would show
    for segments in (SEGMENTS, ASK_OTHER, SEGMENTS, ASK_OTHER):  # cold, then store -> RAM
        pc.generate(segments, **GEN)
    kept = pc.prefill(SEGMENTS)  # its first forward joined RAM-tier chunks into lent memory
    assert kept.stats.ram_hits > 0 and kept.stats.tokens_computed > 0
    snap = _snapshot(kept.cache)
    busy = _joins(pc)["join_busy"]
    assert pc.generate(ASK_OTHER, **GEN).token_ids == want[1]  # same shapes: would reuse
    assert _unchanged(kept.cache, snap)
    assert _continue(model, kept.prompt.input_ids, kept.cache) == want[0]
    assert _joins(pc)["join_busy"] > busy  # the kept cache's memory was not lent
    pc.close()


def test_longer_then_shorter_prompt_and_a_kept_cropped_view(tmp_path: Path) -> None:
    model, pc = _handle("llama", tmp_path / "s")
    want = {i: _plain(pc, s) for i, s in enumerate((SEGMENTS, ASK_OTHER, LONG))}
    for segments in (LONG, LONG, SEGMENTS, ASK_OTHER, SEGMENTS, ASK_OTHER):
        pc.generate(segments, **GEN)
    kept = pc.prefill(LONG)  # the longest join: the memory every later one fits in
    kept.cache.crop(-3)  # a view of a view of the lent memory, as DynamicLayer.crop leaves
    snap = _snapshot(kept.cache)
    before = _joins(pc)
    for i, segments in ((0, SEGMENTS), (1, ASK_OTHER), (0, SEGMENTS)):
        assert pc.generate(segments, **GEN).token_ids == want[i]
    assert _unchanged(kept.cache, snap)
    del kept, snap  # once let go, the memory is lent again, shorter prompts inside it
    for i, segments in ((1, ASK_OTHER), (0, SEGMENTS), (2, LONG)):
        assert pc.generate(segments, **GEN).token_ids == want[i]
    after = _joins(pc)
    assert after["join_busy"] > before["join_busy"] and after["join_reuses"] > before["join_reuses"]
    pc.close()


@pytest.mark.parametrize("grad", [True, False])
def test_a_prefilled_cache_joined_by_the_callers_own_forward(tmp_path: Path, grad: bool) -> None:
    """A prefill that computes nothing returns the chunks unjoined; the caller's forward (autograd
    on, or ``no_grad`` after percache's inference-mode forwards took the memory) joins them."""
    from percache_plugin.kv.blocks import block_prompt

    model, tok = tiny_pair("llama", initializer_range=0.5)
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=1 << 24, prefix_block_tokens=16)
    ids = [(7 * i) % 250 + 3 for i in range(2 * 16 + 1)]  # two blocks and a one-token tail
    with pc.disabled():
        want = pc.complete(ids, **GEN).token_ids
    for _ in range(3):  # cold, store -> RAM, RAM (its join takes the memory, in inference mode)
        assert pc.complete(ids, **GEN).token_ids == want
    kept = pc.prefill(block_prompt(ids, 16, pc.engine.fingerprint))
    assert kept.stats.tokens_computed == 0 and kept.stats.ram_hits == 2
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=torch.tensor([ids[-1:]]), past_key_values=kept.cache).logits
    assert logits.requires_grad == grad and int(logits[0, -1].argmax()) == want[0]
    if not grad:  # the memory percache's inference-mode join took was written again
        assert _joins(pc)["join_reuses"] > 0
    pc.close()


def test_a_prefilled_cache_decoded_in_another_thread_while_requests_run(tmp_path: Path) -> None:
    import threading

    model, pc = _handle("llama", tmp_path / "s")
    want = {i: _plain(pc, s) for i, s in enumerate((SEGMENTS, ASK_OTHER, LONG))}
    for segments in (SEGMENTS, ASK_OTHER, SEGMENTS, ASK_OTHER):
        pc.generate(segments, **GEN)
    kept = pc.prefill(SEGMENTS)
    started, served = threading.Event(), threading.Event()
    got: list[int] = []

    def decode() -> None:  # its first step reads the joined prefix after the requests below
        started.set()
        served.wait(60)
        got.extend(_continue(model, kept.prompt.input_ids, kept.cache))

    worker = threading.Thread(target=decode)
    worker.start()
    started.wait(60)
    try:
        assert [pc.generate(s, **GEN).token_ids for s in (SEGMENTS, ASK_OTHER)] == [want[0], want[1]]
    finally:
        served.set()
        worker.join(60)
    assert got == want[0]
    pc.close()
