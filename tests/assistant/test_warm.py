"""Warming the K/V store with document chunks in idle time (``Config.kv_warm``)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import percache_plugin as percache
from percache_plugin.assistant.ask import segments_for
from percache_plugin.assistant.warm import WARM_QUERY, likely_first
from percache_plugin.rag.chunking import Chunk
from tests.helpers import tiny_pair

DOCS = [
    "Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.",
    "Ben: the budget review is on Monday; travel costs are over plan.",
    "Carl: I borrowed the projector and will return it on Saturday.",
]


def _pc(**config: Any) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    config = {"embedder": "hash", "predict": "off", "answer_grounding": False, "use_kv": True,
              "reuse": "shifted", "kv_warm": True, **config}
    # draft_calibrate_idle off: these tests count the other idle tasks (tests/assistant/test_calibrate_task.py)
    pc = percache.enable(model, tok, draft_calibrate_idle=False, **config)
    pc.add_documents(DOCS, scope="u")
    return pc


def _chunk_ids(pc: percache.PerCache) -> list[str]:
    return pc.knowledge.chunk_ids()


def _warm_segments(pc: percache.PerCache, cid: str) -> list[Any]:
    return segments_for(pc.config.system_prompt, WARM_QUERY, [pc.knowledge.chunk(cid)])


def test_new_documents_queue_one_warm_task_per_chunk() -> None:
    pc = _pc()
    ids = _chunk_ids(pc)
    assert sorted(t.question for t in pc.idle_queue.pending() if t.kind == "warm") == sorted(ids)
    report = pc.idle()
    assert report.by_kind == {"warm": len(ids)}
    assert all(pc.kv_cached(_warm_segments(pc, cid), "u") for cid in ids)
    cost = pc.background_stats.by_kind["warm"]
    assert cost.tasks == len(ids) and cost.prefill_tokens == report.prefill_tokens > 0


def test_warmed_chunks_serve_a_later_question() -> None:
    cold, warm = _pc(kv_warm=False), _pc()
    assert not [t for t in cold.idle_queue.pending() if t.kind == "warm"]
    warm.idle()
    q = "When is the choir rehearsal and who has the projector?"
    a_cold = cold.ask(q, scope="u", max_new_tokens=2)
    a_warm = warm.ask(q, scope="u", max_new_tokens=2)
    assert a_cold.sources == a_warm.sources and len(a_warm.sources) >= 2
    assert a_cold.stats is not None and a_warm.stats is not None
    assert a_cold.stats.tokens_reused == 0 and a_cold.stats.tokens_shifted == 0
    assert a_warm.stats.tokens_reused > 0  # the first chunk, stored after the system prompt
    assert a_warm.stats.tokens_shifted > 0  # the others, found by their tokens
    assert a_warm.stats.approximate  # shifted reuse is reported as inexact
    assert a_warm.stats.tokens_computed < a_cold.stats.tokens_computed


def test_exact_reuse_only_serves_the_first_chunk_exactly() -> None:
    pc = _pc(reuse="exact")
    pc.idle()
    a = pc.ask("When is the choir rehearsal and who has the projector?", scope="u", max_new_tokens=2)
    assert a.stats is not None and a.stats.tokens_reused > 0
    assert a.stats.tokens_shifted == 0 and not a.stats.approximate


def test_warming_stops_at_its_share_of_the_byte_limit() -> None:
    pc = _pc(kv_byte_limit=10**9, kv_warm_max_share=1e-9)
    report = pc.idle()
    n = len(_chunk_ids(pc))
    assert n > 1 and report.remaining == 0  # every task left the queue
    # the first finds the store empty and stores its chunk; the others find it over the share,
    # do nothing and are counted as skipped, not as work done
    assert report.by_kind == {"warm": 1} and report.tasks_run == 1
    assert report.skipped_by_kind == {"warm": n - 1}
    assert pc.background_stats.by_kind["warm"].tasks == 1
    assert "skipped " + str(n - 1) + " warm" in report.summary()
    assert len(pc.store.nodes()) == 2  # the system prompt and one chunk


def test_a_warm_task_whose_chunk_is_gone_is_skipped() -> None:
    pc = _pc()
    gone = _chunk_ids(pc)[0]
    assert pc.knowledge.remove_chunks([gone]) == 1  # its task leaves the queue with it
    assert sorted(t.question for t in pc.idle_queue.pending() if t.kind == "warm") == sorted(_chunk_ids(pc))
    pc.idle_queue.push("warm", gone, "u")  # as when another process removed it
    report = pc.idle()
    assert report.skipped_by_kind == {"warm": 1} and report.remaining == 0
    assert report.by_kind == {"warm": len(_chunk_ids(pc))}


def test_warming_is_on_by_default_and_switches_off() -> None:
    assert percache.Config().kv_warm is True
    off = _pc(kv_warm=False)
    assert not [t for t in off.idle_queue.pending() if t.kind == "warm"]
    assert "warm" not in off.idle().by_kind


def test_no_warming_without_kv() -> None:
    pc = _pc(use_kv=False)
    assert not [t for t in pc.idle_queue.pending() if t.kind == "warm"]


def test_likely_first_orders_by_centrality() -> None:
    chunks = [Chunk(id=f"c{i}", doc_id="d", index=i, text="x", scope=None) for i in range(4)]
    vectors = {"c0": np.array([0.0, 1.0]), "c1": np.array([1.0, 0.0]), "c2": np.array([1.0, 0.1])}
    # the mean of the unit vectors is nearest c2 (between the two others), then c1, then c0;
    # c3 (no vector) last
    assert likely_first(chunks, vectors) == ["c2", "c1", "c0", "c3"]
    assert likely_first(chunks, {}) == ["c0", "c1", "c2", "c3"]


def test_a_chunk_stored_after_another_is_warmed_exactly_after_the_system_prompt() -> None:
    pc = _pc()
    a = pc.ask("When is the choir rehearsal and who has the projector?", scope="u", max_new_tokens=2)
    later = a.sources[1:]  # stored in the tree after the first source, not after the system prompt
    assert later and not any(pc.kv_cached(_warm_segments(pc, cid), "u") for cid in later)
    pc.idle()
    # without exact_only the warm prefill would reuse the stored copy shifted and store nothing
    assert all(pc.kv_cached(_warm_segments(pc, cid), "u") for cid in later)


def test_exact_only_prefill_computes_what_shifted_reuse_would_serve() -> None:
    pc = _pc()
    a = pc.ask("When is the choir rehearsal and who has the projector?", scope="u", max_new_tokens=2)
    segments = _warm_segments(pc, a.sources[1])
    shifted = pc.engine.prefill(segments, scope="u").stats
    assert shifted.tokens_shifted > 0 and shifted.approximate
    pc2 = _pc()
    pc2.ask("When is the choir rehearsal and who has the projector?", scope="u", max_new_tokens=2)
    exact = pc2.engine.prefill(segments, exact_only=True, scope="u").stats
    assert exact.tokens_shifted == 0 and exact.tokens_recomputed == 0 and not exact.approximate
    assert exact.tokens_computed > shifted.tokens_computed


def test_a_foreground_request_preempts_warming_between_prefill_chunks() -> None:
    pc = _pc(background_prefill_chunk=4)
    n = len(_chunk_ids(pc))
    p = pc.engine.preemption
    p.background = threading.get_ident()  # this thread plays the idle worker
    lengths: list[int] = []

    def arrive(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        lengths.append(kwargs["input_ids"].shape[1])
        if len(lengths) == 2:
            p.flag.set()  # a foreground request arrives during the second chunk

    hook = pc.model.get_decoder().register_forward_pre_hook(arrive, with_kwargs=True)
    try:
        report = pc.idle()
    finally:
        hook.remove()
        p.background = None
        p.flag.clear()
    assert lengths == [4, 4]  # stopped before the third chunk
    assert report.stopped_by == "preempted" and report.preempted == 1 and report.tasks_run == 0
    assert report.remaining_by_kind == {"warm": n}  # the interrupted task stays queued
    assert not any(pc.kv_cached(_warm_segments(pc, cid), "u") for cid in _chunk_ids(pc))
    assert pc.idle().by_kind == {"warm": n}  # and runs in full later
