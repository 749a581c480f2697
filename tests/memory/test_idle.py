"""Extraction in idle time: raw turns and model output into facts, de-duplicated, preempted by
a foreground request, and never half-written by a kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.core.preemption import Preempted
from percache_plugin.idle import IdleReport, IdleTask
from percache_plugin.memory.bank import MemoryBank
from percache_plugin.memory.idle import ExtractionStats, queue_turns, run_extraction
from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.stats import GenerationStats
from tests.helpers import tiny_pair
from tests.tokenizer import byte_tokenizer


def test_chat_turns_become_raw_memory_items_in_idle_time() -> None:
    model, tok = tiny_pair("llama")
    # draft_calibrate_idle off: these tests count the other idle tasks (tests/assistant/test_calibrate_task.py)
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off", memory_extraction="raw",
                         prediction_quiet_s=0.0)
    reply = pc.chat("I moved to Porto last week with my cat", memory_scope="ana", max_new_tokens=3)
    assert [t.kind for t in pc.idle_queue.pending()] == ["memory_extract"]
    assert pc.memory.list("ana") == []  # nothing before idle time
    pc.idle()
    (fact,) = pc.memory.list("ana")
    assert fact.text.startswith("User: I moved to Porto last week with my cat")
    assert fact.metadata["source"] == f"default:{reply.turn_id}" and fact.metadata["kind"] == "raw"
    assert pc.memory.extraction.raw_items == 1 and pc.memory.extraction.turns == 1
    # The same turn extracted again is a duplicate: stored once, not deleted.
    queue_turns(pc.idle_queue, "default", [(reply.turn_id, fact.text)], "ana")
    pc.idle()
    assert [f.id for f in pc.memory.list("ana")] == [fact.id]
    assert pc.memory.extraction.duplicates == 1
    pc.disable()


class _Ctx(SimpleNamespace):
    """What run_extraction reads of an IdleContext, with a fixed model output."""

    def __init__(self, output: str, grammar: bool = False, fail_at: int | None = None) -> None:
        super().__init__(ctx=SimpleNamespace(config=percache.Config(
            embedder="hash", memory_extract_grammar=grammar),
            idle_queue=SimpleNamespace(queued=lambda task: True)),  # every task still queued
            tokenizer=byte_tokenizer(), context=None)
        self.output = output
        self.prompts: list[Any] = []
        self.kwargs: list[dict[str, Any]] = []
        self.fail_at = fail_at

    def generate(self, segments: Any, **kw: Any) -> Any:
        if self.fail_at is not None and len(self.prompts) == self.fail_at:
            raise Preempted("a foreground request")
        self.prompts.append(segments)
        self.kwargs.append(kw)
        return SimpleNamespace(text=self.output, stats=GenerationStats(tokens_computed=5, new_tokens=7))


def test_model_output_validated_deduplicated_and_superseding() -> None:
    bank = MemoryBank(None, HashEmbedder())
    stats = ExtractionStats()
    out = ('{"summary": "Ana lives in Lisbon near the river", "participants": "Ana", "item": "home"}\n'
           '{"summary": "Ana lives in Lisbon near the river"}\n'
           'Ana is nice.\n'
           '{"summary": "Ana adopted a cat named Miso"}\n')  # the template's example, copied
    task = IdleTask(1, "memory_extract", '{"session": "s", "turns": [[1, "Ana: I live in Lisbon."]]}', "ana", 0)
    c = _Ctx(out)
    run_extraction(c, task, IdleReport(), bank, stats, "model")  # type: ignore[arg-type]
    assert "Ana: I live in Lisbon." in c.prompts[0][-1].text
    assert stats.malformed == 2 and stats.facts_added == 1 and stats.duplicates == 1
    (old,) = bank.list("ana")
    assert old.metadata["source"] == "s:1" and old.subject == "ana home"
    c.output = '{"summary": "Ana moved from Lisbon to Porto", "participants": "Ana", "item": "home"}'
    task2 = IdleTask(2, "memory_extract", '{"session": "s", "turns": [[7, "Ana: We moved to Porto!"]]}', "ana", 0)
    run_extraction(c, task2, IdleReport(), bank, stats, "both")  # type: ignore[arg-type]
    assert stats.superseded == 1 and stats.raw_items == 1
    assert bank.get(old.id).status == "superseded"
    texts = {f.text for f in bank.list("ana")}
    assert texts == {"Ana moved from Lisbon to Porto", "Ana: We moved to Porto!"}
    bad = IdleTask(3, "memory_extract", "not json", "ana", 0)
    run_extraction(c, bad, IdleReport(), bank, stats, "model")  # type: ignore[arg-type]
    assert stats.bad_tasks == 1


def test_constrained_extraction_calls_the_model_once_per_turn_and_attributes_each_fact() -> None:
    bank = MemoryBank(None, HashEmbedder())
    stats = ExtractionStats()
    task = IdleTask(1, "memory_extract", '{"session": "s", "turns": [[1, "Ana: I live in Lisbon."], '
                    '[2, "[1 May] Ben: I play the cello."]]}', "ana", 0)
    c = _Ctx('{"summary": "Ana lives in Lisbon."}\n', grammar=True)
    run_extraction(c, task, IdleReport(), bank, stats, "model")  # type: ignore[arg-type]
    # The same output for Ben's turn is not in that turn: dropped as ungrounded, never stored.
    assert stats.model_calls == 2 and stats.facts_added == 1 and stats.ungrounded == 1
    assert stats.duplicates == 0
    assert "Ana: I live in Lisbon." in c.prompts[0][-1].text and "about Ana," in c.prompts[0][-1].text
    assert "about Ben," in c.prompts[1][-1].text
    assert [p.lead for kw in c.kwargs for p in kw["logits_processor"]] == [
        tuple(c.tokenizer.encode(n, add_special_tokens=False)) for n in ("Ana", "Ben")]
    (fact,) = bank.list("ana")
    assert fact.metadata["source"] == "s:1"  # the turn it came from, not the whole task


def test_preempted_constrained_extraction_stores_nothing_of_its_task() -> None:
    bank = MemoryBank(None, HashEmbedder())
    stats = ExtractionStats()
    task = IdleTask(1, "memory_extract", '{"session": "s", "turns": [[1, "Ana: I live in Lisbon."], '
                    '[2, "Ben: I play the cello."]]}', "ana", 0)
    c = _Ctx('{"summary": "Ana lives in Lisbon."}\n', grammar=True, fail_at=1)
    with pytest.raises(Preempted):
        run_extraction(c, task, IdleReport(), bank, stats, "both")  # type: ignore[arg-type]
    assert bank.list("ana") == [] and stats.facts_added == 0


def test_foreground_preempts_extraction_within_a_decode_step() -> None:
    """Once a foreground call raises the preempt flag, extraction starts at most one more
    decode step (the flag is checked after every token; one step may start in the instant
    between that check and the flag). Counted, not timed, so load cannot fail it; the wall
    time (one decode step plus 50 ms at most) is measured by `percache bench idle` over the
    same engine path."""
    # Free generation: a tiny random model under the grammar may end at once, and the
    # preemption this checks is the engine's, the same with or without the grammar.
    model, tok = tiny_pair("llama", num_hidden_layers=4)
    pc = percache.enable(model, tok, draft_calibrate_idle=False, embedder="hash", predict="off", memory_extraction="model",
                         memory_extract_tokens=4000, memory_extract_grammar=False)
    flag = pc.engine.preemption.flag
    flagged: list[bool] = []  # per background decode step: was the flag up when it started?
    decoding = threading.Event()

    class Watch:
        @percache.hookimpl(wrapper=True)
        def percache_attention(self, ctx, module, query, key, value, attention_mask, kwargs):  # type: ignore[no-untyped-def]
            background = threading.current_thread().name == "percache-idle"
            if query.shape[2] == 1 and background and module.layer_idx == 0:
                flagged.append(flag.is_set())
                if len(flagged) > 3:
                    decoding.set()
            return (yield)

    pc.plugins.register(Watch())
    queue_turns(pc.idle_queue, "s", [(1, "Ana: I adopted a cat named Miso in May.")], "ana")
    worker = pc.start_idle_worker(poll_s=0.01)
    assert decoding.wait(60), "extraction never started decoding"
    try:
        pc.chat("Hello", max_new_tokens=2)
    finally:
        pc.stop_idle_worker()
    assert not flagged[0] and sum(flagged) <= 1, flagged
    deadline = time.monotonic() + 10
    while worker.report.preempted == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.report.preempted >= 1
    # The preempted task is still queued (beside the chat turn's own) and stored nothing.
    assert any("Miso" in t.question for t in pc.idle_queue.pending())
    assert pc.memory.list("ana") == []
    pc.disable()


CHILD = textwrap.dedent("""
    import os, signal, sys
    import percache_plugin as percache
    from percache_plugin.memory import rows
    from percache_plugin.memory.idle import queue_turns
    from tests.helpers import tiny_pair
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, draft_calibrate_idle=False, store=sys.argv[1], embedder="hash", predict="off",
                         memory_extraction="raw")
    queue_turns(pc.idle_queue, "s", [(1, "Ana adopted a cat named Miso"),
                                     (2, "Ben plays the cello on Sundays")], "ana")
    insert = rows.FactRows.insert
    def insert_then_die(self, *args, **kwargs):
        insert(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # after the first fact, inside the transaction
    rows.FactRows.insert = insert_then_die
    pc.idle()
""")


def test_kill_9_during_extraction_leaves_no_half_written_fact(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(store)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, draft_calibrate_idle=False, store=store, embedder="hash", predict="off",
                         memory_extraction="raw")
    assert pc.memory.list("ana") == []  # the first fact's insert was rolled back
    assert [t.kind for t in pc.idle_queue.pending()] == ["memory_extract"]
    pc.idle()
    assert sorted(f.text for f in pc.memory.list("ana")) == [
        "Ana adopted a cat named Miso", "Ben plays the cello on Sundays"]
    pc.disable()


def test_a_fact_invented_by_the_model_is_dropped_and_counted_and_a_kept_one_carries_its_turn() -> None:
    bank = MemoryBank(None, HashEmbedder())
    stats = ExtractionStats()
    turn = "Ana: I adopted two kittens from the Porto shelter."
    out = ('{"summary": "Ana adopted kittens from a shelter in Porto"}\n'
           '{"summary": "Ana works as a surgeon at Lisbon hospital"}\n')  # not in the turn
    task = IdleTask(1, "memory_extract", json.dumps({"session": "s", "turns": [[4, turn]]}), "ana", 0)
    run_extraction(_Ctx(out), task, IdleReport(), bank, stats, "model")  # type: ignore[arg-type]
    assert stats.ungrounded == 1 and stats.facts_added == 1 and stats.malformed == 0
    (fact,) = bank.list("ana")
    assert fact.text == "Ana adopted kittens from a shelter in Porto"
    assert fact.metadata["context"] == turn and fact.metadata["source"] == "s:4"
    assert [f.text for f in bank.list("ana") if "surgeon" in f.text] == []
    # Switched off, the invented fact is stored; without context keys no context is kept.
    off, stats2 = MemoryBank(None, HashEmbedder()), ExtractionStats()
    c = _Ctx(out)
    c.ctx.config = percache.Config(embedder="hash", memory_extract_grammar=False, memory_grounding=0.0,
                                   memory_context_keys=False)
    run_extraction(c, task, IdleReport(), off, stats2, "model")  # type: ignore[arg-type]
    assert stats2.ungrounded == 0 and len(off.list("ana")) == 2
    assert all("context" not in f.metadata for f in off.list("ana"))
