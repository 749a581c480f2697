"""Idle-time work: population policy, conversions, refresh, accounting, preemption."""

from __future__ import annotations

import threading
import time
from typing import Any

import percache_plugin as percache
from percache_plugin.assistant.ask import segments_for
from percache_plugin.rag.qa_types import QAEntry
from tests.helpers import tiny_pair

DOCS = [
    "Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.",
    "Ben: the budget review is on Monday; travel costs are over plan.",
    "Carl: I borrowed the projector and will return it on Saturday.",
]
PREDICTED = ["When is the rehearsal?", "Who has the projector?"]


def _pc(**config: Any) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    # answer_grounding off: a random tiny model emits stray digits, which the check would flag
    config = {"embedder": "hash", "predict": "off", "background_max_new_tokens": 3,
              "answer_grounding": False, **config}
    # draft_calibrate_idle off: these tests count the other idle tasks (tests/assistant/test_calibrate_task.py)
    pc = percache.enable(model, tok, draft_calibrate_idle=False, **config)
    pc.add_documents(DOCS, scope="u")
    return pc


def _populate(pc: percache.PerCache) -> None:
    for q in PREDICTED:
        pc.idle_queue.push("populate", q, "u")


def test_high_threshold_prefills_only() -> None:
    pc = _pc(similarity_threshold=0.95, population_cutoff=0.9)
    _populate(pc)
    report = pc.idle()
    # the documents' chunks are warmed too (Config.kv_warm, on by default): prefill only
    assert report.by_kind == {"warm": len(DOCS), "populate": 2} and report.decode_tokens == 0
    entries = pc.qa_bank.entries(scope="u")
    assert {e.question for e in entries} == set(PREDICTED)
    assert all(e.answer is None and e.origin == "predicted" for e in entries)
    for e in entries:
        assert pc.kv_cached(segments_for(pc.config.system_prompt, e.question, [pc.knowledge.chunk(c) for c in e.sources]),
                           e.scope)
    # An answerless entry is never served.
    assert pc.ask(PREDICTED[0], scope="u", max_new_tokens=2).source == "generated"


def test_lowering_threshold_decodes_answerless_entries() -> None:
    pc = _pc(similarity_threshold=0.95, population_cutoff=0.9)
    _populate(pc)
    pc.idle()
    pc.configure(similarity_threshold=0.85)
    assert sorted(t.kind for t in pc.idle_queue.pending()) == ["decode", "decode"]
    report = pc.idle()
    assert report.by_kind == {"decode": 2} and report.decode_tokens > 0
    assert all(e.answer for e in pc.qa_bank.entries(scope="u"))
    assert pc.ask(PREDICTED[1], scope="u", max_new_tokens=2).source == "qa_bank"


def test_low_threshold_decodes_predictions_at_once() -> None:
    pc = _pc(similarity_threshold=0.8, population_cutoff=0.9)
    _populate(pc)
    report = pc.idle()
    assert report.decode_tokens > 0
    assert all(e.answer for e in pc.qa_bank.entries(scope="u"))


def test_raising_kv_limit_restores_evicted_kv() -> None:
    pc = _pc(similarity_threshold=0.95, population_cutoff=0.9)
    _populate(pc)
    pc.idle()
    entry = pc.qa_bank.entries(scope="u")[0]
    segs = segments_for(pc.config.system_prompt, entry.question,
                        [pc.knowledge.chunk(c) for c in entry.sources])
    assert pc.kv_cached(segs, "u")
    pc.configure(kv_byte_limit=1)  # evicts every node
    assert not pc.kv_cached(segs, "u")
    pc.configure(kv_byte_limit=2**30)
    assert {t.kind for t in pc.idle_queue.pending()} == {"reprefill"}
    report = pc.idle()
    assert report.by_kind.get("reprefill", 0) >= 1
    assert pc.kv_cached(segs, "u")


QA_PLUGIN = "percache_plugin.plugins.banks:QABankPlugin"


class OwnQAStore:
    """A QA store of its own: one answerless entry; it knows every question."""

    def __init__(self) -> None:
        self.entry = QAEntry(7, PREDICTED[1], None, "u", (), False, 0, 0.0, 0.0, "predicted", 0)
        self.asked: list[tuple[Any, Any]] = []

    @percache.hookimpl
    def percache_qa_entries(self, ctx: Any, scope: Any, question: str | None) -> list[QAEntry]:
        self.asked.append((scope, question))
        return [self.entry] if question in (None, self.entry.question) else []

    @percache.hookimpl
    def percache_qa_known(self, ctx: Any, query: Any, scope: str | None) -> bool:
        return True


def test_maintenance_reads_the_registered_qa_plugin_only() -> None:
    pc = _pc(similarity_threshold=0.95, population_cutoff=0.9)
    _populate(pc)
    pc.idle()  # the built-in bank holds two answerless entries
    ctx, query = pc.assistant.ctx, pc.assistant.query(PREDICTED[0])
    assert pc.hooks.qa_known(ctx, query, "u") and not pc.hooks.qa_known(ctx, query, "other")
    pc.plugins.unregister(name=QA_PLUGIN)
    pc.configure(similarity_threshold=0.85)  # would decode both entries with the built-in bank
    assert pc.idle_queue.pending() == [] and not pc.hooks.qa_known(ctx, query, "u")
    pc.configure(similarity_threshold=0.95)
    own = OwnQAStore()
    pc.plugins.register(own)
    pc.configure(similarity_threshold=0.85)
    assert [(t.kind, t.question) for t in pc.idle_queue.pending()] == [("decode", PREDICTED[1])]
    assert pc.hooks.qa_known(ctx, pc.assistant.query("anything at all?"), "u")
    assert pc.idle_queue.push("reprefill", PREDICTED[1], "u")
    report = pc.idle()
    assert report.by_kind == {"decode": 1, "reprefill": 1}
    assert ("u", PREDICTED[1]) in own.asked  # the re-prefill looked its entry up in the plugin
    pc.close()


def test_background_compute_is_accounted_per_kind() -> None:
    pc = _pc(similarity_threshold=0.8, population_cutoff=0.9)
    _populate(pc)
    pc.idle()
    cost = pc.background_stats.by_kind["populate"]
    assert cost.tasks == 2 and cost.prefill_tokens > 0 and cost.decode_tokens > 0
    assert cost.flops == 2.0 * pc.n_parameters * (cost.prefill_tokens + cost.decode_tokens)


def test_documents_trigger_per_chunk_predictions_then_abstract() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", prediction_quiet_s=30.0, knowledge_rounds=2)
    report = pc.add_documents(DOCS, scope="u")
    pending = pc.idle_queue.pending()
    n = len(report.new_chunks)
    # then their K/V is warmed, one task per chunk (Config.kv_warm, on by default)
    assert [t.kind for t in pending] == ["predict_knowledge"] * (2 * n) + ["abstract"] + ["warm"] * n
    assert {t.question for t in pending[:n]} == {f"chunk {c.id}" for c in report.new_chunks}
    assert {t.question for t in pending[-n:]} == {c.id for c in report.new_chunks}
    assert pc.idle_queue.peek() is None  # the background worker waits for the quiet period
    for t in pending:
        pc.idle_queue.done(t)
    assert pc.predict("knowledge", scope="u") == n
    assert all(t.kind == "predict_knowledge" for t in pc.idle_queue.pending())


def test_explicit_idle_does_not_wait_for_the_quiet_period() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", prediction_quiet_s=30.0,
                         background_max_new_tokens=4)
    pc.add_documents(DOCS, scope="u")
    report = pc.idle()
    assert report.by_kind.get("predict_knowledge") == len(DOCS) and report.by_kind.get("abstract") == 1
    assert report.stopped_by == "done" and report.remaining == len(pc.idle_queue)
    assert "tasks in" in report.summary()


def test_budget_stops_at_the_next_token() -> None:
    model, tok = tiny_pair("llama", num_hidden_layers=4)
    # kv_warm off: the budget must stop this populate's decoding, not the warm tasks queued first
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off", similarity_threshold=0.8,
                         population_cutoff=0.9, background_max_new_tokens=7000, kv_warm=False)
    pc.add_documents(DOCS, scope="u")
    pc.idle_queue.push("populate", PREDICTED[0], "u")
    # One decode step of this model, measured.
    t0 = time.perf_counter()
    step = pc.generate(["Hello", "Quick question?"], max_new_tokens=8)
    per_token = (time.perf_counter() - t0) / max(1, len(step.token_ids))
    budget = 1.0
    report = pc.idle(budget_s=budget)
    assert report.stopped_by == "budget" and report.preempted == 1
    assert report.seconds <= budget + 10 * per_token + 0.5, (report.seconds, per_token)
    assert report.remaining_by_kind == {"populate": 1}  # the interrupted task stays queued
    assert pc.engine.preemption.deadline is None


def test_foreground_preempts_background_decoding() -> None:
    model, tok = tiny_pair("llama", num_hidden_layers=4)
    # kv_warm off: this is about a decoding task (warming is preempted in tests/assistant/test_warm.py)
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off", similarity_threshold=0.8,
                         population_cutoff=0.9, background_max_new_tokens=4000, kv_warm=False)
    pc.add_documents(DOCS, scope="u")
    decoding = threading.Event()

    class Watch:
        @percache.hookimpl(wrapper=True)
        def percache_attention(self, ctx, module, query, key, value, attention_mask, kwargs):
            if query.shape[2] == 1 and threading.current_thread().name == "percache-idle":
                decoding.set()
            return (yield)

    pc.plugins.register(Watch())
    pc.idle_queue.push("populate", PREDICTED[0], "u")
    worker = pc.start_idle_worker(poll_s=0.01)
    assert decoding.wait(60), "the background task never started decoding"
    t0 = time.perf_counter()
    g = pc.generate(["Hello", "Quick question?"], max_new_tokens=2)
    took = time.perf_counter() - t0
    assert g.token_ids and took < 30
    deadline = time.monotonic() + 10
    while worker.report.preempted == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.report.preempted >= 1 and worker.report.tasks_run == 0
    # The preempted task is still queued and left no QA entry behind.
    assert [t.kind for t in pc.idle_queue.pending()] == ["populate"]
    assert pc.qa_bank.entries(scope="u") == []
    report = pc.stop_idle_worker()
    assert report is not None and not worker.running


def test_prediction_seed_is_stable_across_processes() -> None:
    """Regression: the seed came from Python's str hash, randomized per process."""
    import os
    import subprocess
    import sys

    code = ("from percache_plugin.idle import IdleTask; from percache_plugin.assistant.idle_tasks import round_seed;"
            "print(round_seed(IdleTask(1, 'predict_knowledge', 'round 1', 'u', 0.0), 'abstract'))")
    procs = [subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": hash_seed},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for hash_seed in ("1", "2")]  # side by side: each spends its time importing torch
    seeds = set()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        seeds.add(out.strip())
    assert len(seeds) == 1 and "" not in seeds


def test_knowledge_predictions_without_a_scope_ask_about_unscoped_chunks_only() -> None:
    # scope=None means unscoped documents: questions about another scope's chunks queued under
    # None would carry that scope's text into the unscoped QA bank.
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", prediction_quiet_s=30.0, knowledge_rounds=1)
    mine = pc.add_documents(DOCS[:1]).new_chunks
    theirs = pc.add_documents(DOCS[1:], scope="alice").new_chunks
    assert mine and theirs
    for t in pc.idle_queue.pending():
        pc.idle_queue.done(t)
    assert pc.predict("knowledge") == len(mine)
    queued = [t for t in pc.idle_queue.pending() if t.kind == "predict_knowledge"]
    assert {t.question for t in queued} == {f"chunk {c.id}" for c in mine}
    assert {t.scope for t in queued} == {None}
    pc.close()
