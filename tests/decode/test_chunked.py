"""Background prefill in chunks: the same K/V as one forward, and a stop within one chunk."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch
from transformers import DynamicCache

import percache_plugin as percache
from percache_plugin.core.preemption import Preempted, Preemption
from percache_plugin.decode.chunked import chunk_bounds, interrupt_check, prefill_chunked
from tests.helpers import VOCAB, baseline, tiny_pair
from tests.models import TINY_FAMILIES

LONG_DOC = " ".join(f"Item {i}: the meeting on day {i % 7} moved to room {i % 5}." for i in range(12))
QUESTION = "Which room is the meeting in?"


def _one_shot(model: Any, ids: list[int]) -> DynamicCache:
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


def _greedy(model: Any, ids: list[int], cache: DynamicCache) -> list[int]:
    x = torch.tensor([ids])
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), past_key_values=cache,
                             max_new_tokens=8, do_sample=False, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_chunked_prefill_gives_one_forwards_kv_and_output(family: str) -> None:
    model, _ = tiny_pair(family)
    ids = torch.randint(4, VOCAB, (150,), generator=torch.Generator().manual_seed(1)).tolist()
    whole = _one_shot(model, ids[:-1])
    chunked = DynamicCache()
    assert prefill_chunked(model, ids, chunked, 0, len(ids) - 1, 16) == len(ids) - 1
    assert chunked.get_seq_length() == whole.get_seq_length() == len(ids) - 1
    for a, b in zip(whole.layers, chunked.layers, strict=True):
        assert (a.keys - b.keys).abs().max().item() <= 1e-5
        assert (a.values - b.values).abs().max().item() <= 1e-5
    assert _greedy(model, ids, chunked) == _greedy(model, ids, whole)


def test_stop_is_checked_before_every_chunk() -> None:
    model, _ = tiny_pair("llama")
    ids = list(range(4, 104))
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 3  # three chunks run, the fourth check stops

    cache = DynamicCache()
    assert prefill_chunked(model, ids, cache, 0, 99, 10, stop) == 30
    assert cache.get_seq_length() == 30 and len(calls) == 4


def test_chunk_bounds() -> None:
    assert list(chunk_bounds(3, 20, 8)) == [(3, 11), (11, 19), (19, 20)]
    assert list(chunk_bounds(5, 5, 8)) == []
    with pytest.raises(ValueError, match="positive int"):
        list(chunk_bounds(0, 4, 0))


def test_interrupt_check_is_for_background_and_budgeted_calls_only() -> None:
    p = Preemption()
    assert interrupt_check(p) is None  # a foreground request: no check, one forward
    p.background = threading.get_ident()
    stop = interrupt_check(p)
    assert stop is not None and not stop()
    p.flag.set()
    assert stop()
    p.background, p.deadline = None, time.perf_counter() - 1
    late = interrupt_check(p)
    assert late is not None and late()


class _Forwards:
    """Counts the model's forwards and their lengths; ``on_forward(n)`` runs before each.
    It watches the decoder, which every forward runs (a splice forward runs only the decoder)."""

    def __init__(self, model: Any, on_forward: Any = None, seconds_per_token: float = 0.0) -> None:
        self.lengths: list[int] = []
        self._on = on_forward
        self._spt = seconds_per_token
        model.get_decoder().register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        n = kwargs["input_ids"].shape[1]
        self.lengths.append(n)
        if self._on is not None:
            self._on(len(self.lengths))
        if self._spt:
            time.sleep(self._spt * n)  # a slow model: time grows with the tokens computed


def test_background_generate_yields_within_one_chunk() -> None:
    model, tok = tiny_pair("llama")
    # draft_calibrate_idle off: these tests count the other idle tasks (tests/assistant/test_calibrate_task.py)
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off", background_prefill_chunk=16)
    segments = ["You are terse.", LONG_DOC, QUESTION]
    n = pc.prompt(segments).n_tokens
    assert n > 16 * 8
    p = pc.engine.preemption
    p.background = threading.get_ident()  # this thread plays the idle worker
    forwards = _Forwards(model, on_forward=lambda i: p.flag.set() if i == 2 else None)
    with pytest.raises(Preempted):
        pc.generate(segments, max_new_tokens=4)
    assert forwards.lengths == [16, 16]  # the flag rose during the 2nd chunk: no 3rd
    assert not pc.engine.kv_cached(segments)  # an interrupted request stores nothing
    p.background = None
    p.flag.clear()
    # The same request as a foreground call: one prefill forward (with any draft tokens it
    # verifies), the K/V stored.
    g = pc.generate(segments, max_new_tokens=4)
    assert n <= forwards.lengths[2] <= n + g.stats.tokens_drafted
    assert g.stats.tokens_computed == n and g.stats.nodes_stored > 0


def test_background_generate_equals_foreground_output() -> None:
    model, tok = tiny_pair("qwen2")
    segments = ["You are terse.", LONG_DOC, QUESTION]
    fg = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off")
    want = fg.generate(segments, max_new_tokens=8, do_sample=False)
    fg.disable()
    bg = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off", background_prefill_chunk=7)
    bg.engine.preemption.background = threading.get_ident()
    got = bg.generate(segments, max_new_tokens=8, do_sample=False)
    assert got.token_ids == want.token_ids
    assert got.stats.tokens_computed == want.stats.tokens_computed == want.stats.prompt_tokens
    # Stored K/V from the chunked prefill serves an exact hit that answers the same.
    bg.engine.preemption.background = None
    again = bg.generate(segments, max_new_tokens=8, do_sample=False)
    assert again.stats.tokens_reused > 0 and again.token_ids == want.token_ids


def _idle_run(chunk: int, budget: float) -> tuple[float, list[int]]:
    model, tok = tiny_pair("llama")
    # kv_warm off: the one task is the populate prefill whose budget overrun is measured
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off", similarity_threshold=0.8,
                         population_cutoff=0.9, background_max_new_tokens=2,
                         background_prefill_chunk=chunk, kv_warm=False)
    pc.add_documents([LONG_DOC] * 1, scope="u")
    pc.idle_queue.push("populate", QUESTION, "u")
    forwards = _Forwards(model, seconds_per_token=0.004)  # ~2.4 s for the ~600-token prompt in one forward
    report = pc.idle(budget_s=budget)
    assert report.stopped_by == "budget" and report.preempted == 1
    assert report.remaining_by_kind == {"populate": 1}
    return report.seconds, forwards.lengths


def test_idle_budget_overruns_by_at_most_one_chunk() -> None:
    # The budget leaves room for the task's work before its first forward (retrieval, planning),
    # which took over 0.3 s on a loaded machine: the control below then never started a forward.
    budget = 1.0
    chunked, lengths = _idle_run(16, budget)
    assert lengths and max(lengths) <= 16, lengths
    assert chunked <= budget + 16 * 0.004 + 0.25, chunked
    one_forward, lengths = _idle_run(100_000, budget)
    assert lengths and max(lengths) > 16 * 8, lengths  # the prompt went in as one forward
    assert one_forward > budget + 1.0, one_forward  # what the chunking prevents


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_background_splice_runs_in_chunks_with_the_same_result(family: str) -> None:
    segments = ["You are terse.", "Mail from Ana: rehearsal moved to Friday 6pm.",
                "Notes: budget review on Monday; Ben owns slides.", QUESTION]
    reordered = [segments[0], segments[2], segments[1], LONG_DOC, QUESTION]
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off", reuse="shifted",
                         recompute="all", background_prefill_chunk=8)
    pc.generate(segments, max_new_tokens=2)  # stores the chunks in this order
    forwards = _Forwards(model)
    pc.engine.preemption.background = threading.get_ident()
    g = pc.generate(reordered, max_new_tokens=6, do_sample=False)
    pc.engine.preemption.background = None
    assert g.stats.tokens_recomputed > 0 and not g.stats.approximate and not g.stats.fallback
    prefill = forwards.lengths[:-6]  # then one forward per decoded token
    assert len(prefill) > 10 and max(prefill) <= 8, forwards.lengths
    want, logits = baseline(model, g.prompt_ids, 6)
    # fp32 summation-order error only: measured up to 4.9e-6 with logits of magnitude ~5.
    assert g.token_ids == want and (g.first_logits - logits).abs().max().item() <= 1e-4
