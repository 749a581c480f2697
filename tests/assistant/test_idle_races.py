"""Idle work racing a foreground change: a task that computed its result from a document that
was removed or replaced meanwhile never stores it. The races are driven by events in a hook,
not by timing."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.assistant.idle_tasks import BUILTIN_TASKS
from percache_plugin.assistant.worker import IdleWorker
from percache_plugin.hooks.specs import hookimpl
from percache_plugin.idle import IdleReport, IdleTask
from percache_plugin.stats import Generation, GenerationStats
from tests.assistant.test_assistant import BEN, GEN, _pc
from tests.assistant.test_removal_traces import NEEDLES, OTHER, PREDICTED, SECRET, Q, files_holding

CHANGES: dict[str, Callable[[percache.PerCache], object]] = {
    "remove_document": lambda pc: pc.knowledge.remove_document("zz", "me"),
    "remove_chunks": lambda pc: pc.knowledge.remove_chunks(
        [c.id for c in pc.knowledge.chunks() if c.doc_id == "zz"]),
    "replace": lambda pc: pc.add_documents([OTHER], scope="me"),
}


class PauseFirstBackgroundRequest:
    """Holds the idle worker's first request at its start until :attr:`go` is set."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.worker: int | None = None

    @hookimpl
    def percache_request_start(self, ctx: object, prompt: object) -> None:
        if threading.get_ident() == self.worker and not self.started.is_set():
            self.started.set()
            assert self.go.wait(30), "the test never let the request go on"


def _worker_held_at_its_first_request(pc: percache.PerCache) -> tuple[PauseFirstBackgroundRequest, IdleWorker]:
    """Start ``pc``'s idle worker; returns once its first request is held at its start."""
    pause = PauseFirstBackgroundRequest()
    pc.plugins.register(pause)
    worker = pc.start_idle_worker(poll_s=0.01)
    pause.worker = worker.ident
    assert pause.started.wait(30)
    return pause, worker


def _change_while_a_task_runs(pc: percache.PerCache, change: Callable[[percache.PerCache], object]) -> None:
    """Start the worker on the queued task, make ``change`` while its request is held at its
    start (the change either finishes or waits for the engine), then let the request go on."""
    pause, worker = _worker_held_at_its_first_request(pc)
    changer = threading.Thread(target=change, args=(pc,))
    changer.start()
    while changer.is_alive() and not pc.engine.preemption.waiting():
        changer.join(0.005)  # done at once, or waiting for the engine: either way, go on
    pause.go.set()
    changer.join(30)
    assert not changer.is_alive()
    for _ in range(6000):  # the task ends (or runs again after a preemption)
        if not pc.idle_queue.pending():
            break
        threading.Event().wait(0.01)
    assert not pc.idle_queue.pending()
    pc.stop_idle_worker()
    assert worker.errors == []


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "disk"])
def test_an_answer_computed_while_its_document_changes_is_not_kept(tmp_path: Path, change: str,
                                                                  on_disk: bool) -> None:
    pc = _pc(tmp_path if on_disk else None)  # type: ignore[arg-type]
    pc.add_documents([SECRET, BEN], scope="me")
    gone = {c.id for c in pc.knowledge.chunks() if c.doc_id == "zz"}
    pc.idle_queue.push("answer", Q, "me")
    _change_while_a_task_runs(pc, CHANGES[change])
    assert not any(set(e.sources) & gone for e in pc.qa_bank.entries())
    assert not any(n.extra.get("chunk") in gone for n in pc.engine.store.nodes())
    if on_disk:
        assert files_holding(tmp_path, NEEDLES) == []
    answer = pc.ask(Q, scope="me", **GEN)
    assert not set(answer.sources) & gone
    pc.close()


def _idle_while_another_handle_removes(pc: percache.PerCache, other: percache.PerCache) -> None:
    """Run ``pc``'s idle work in a thread; ``other`` removes document ``zz`` while the first
    request is held at its start."""
    pause = PauseFirstBackgroundRequest()
    pc.plugins.register(pause)

    def run_idle() -> None:
        pause.worker = threading.get_ident()
        pc.idle()

    idle = threading.Thread(target=run_idle)
    idle.start()
    assert pause.started.wait(30)
    other.knowledge.remove_document("zz", "me")
    pause.go.set()
    idle.join(60)
    assert not idle.is_alive()


def test_an_answer_computed_while_another_handle_removes_its_document_leaves_no_kv(tmp_path: Path) -> None:
    # two handles on one store: the removal cannot hold the other handle's engine, so the
    # answer's own check after storing it (the store on disk) takes what it stored back
    pc, other = _pc(tmp_path), _pc(tmp_path)
    pc.add_documents([SECRET, BEN], scope="me")
    gone = {c.id for c in pc.knowledge.chunks() if c.doc_id == "zz"}
    pc.idle_queue.push("answer", Q, "me")
    _idle_while_another_handle_removes(pc, other)
    assert not any(set(e.sources) & gone for e in pc.qa_bank.entries())
    stores = pc.engine.ctx.every_store()
    assert not any(n.extra.get("chunk") in gone for s in stores for n in s.nodes())
    pc.close()
    other.close()


def _generating_while(remove: Callable[[], object], text: str) -> Callable[..., Generation]:
    """A generate that lets another handle remove a document, then writes ``text``."""
    def generate(*args: object, **kwargs: object) -> Generation:
        remove()
        return Generation(text, [], [], GenerationStats())
    return generate


@pytest.mark.parametrize("kind", ["predict_knowledge", "abstract"])
def test_predictions_from_a_chunk_another_handle_removes_meanwhile_are_not_kept(tmp_path: Path,
                                                                                kind: str) -> None:
    pc, other = _pc(tmp_path), _pc(tmp_path)
    pc.configure(predict="knowledge")
    pc.add_documents([SECRET, BEN], scope="me")
    gone = next(c.id for c in pc.knowledge.chunks() if c.doc_id == "zz")
    ictx = copy.copy(pc.assistant.idle_context)
    ictx.generate = _generating_while(lambda: other.knowledge.remove_document("zz", "me"),
                                      PREDICTED if kind != "abstract" else "Zorblax keeps code 4417.")
    question = "chunk " + gone if kind == "predict_knowledge" else ""
    BUILTIN_TASKS[kind](ictx, IdleTask(0, kind, question, "me", 0.0), IdleReport())
    assert not any("Zorblax" in t.question for t in pc.idle_queue.pending())
    assert pc.prediction_state.predicted_from([gone]) == set()
    assert pc.prediction_state.abstract("me") == ""
    pc.close()
    other.close()
    assert files_holding(tmp_path, [b"zorblax"]) == []


@pytest.mark.parametrize("kind", ["warm", "populate"])
def test_kv_prefilled_while_another_handle_removes_its_chunk_is_not_kept(tmp_path: Path, kind: str) -> None:
    pc, other = _pc(tmp_path), _pc(tmp_path)
    pc.configure(similarity_threshold=0.95, population_cutoff=0.9,  # populate prefills only
                 kv_warm=kind == "warm")
    pc.add_documents([SECRET], scope="me")
    gone = {c.id for c in pc.knowledge.chunks() if c.doc_id == "zz"}
    pc.idle_queue.push(kind, next(iter(gone)) if kind == "warm" else Q, "me")
    _idle_while_another_handle_removes(pc, other)
    stores = pc.engine.ctx.every_store()
    assert not any(n.extra.get("chunk") in gone for s in stores for n in s.nodes())
    assert not any(set(e.sources) & gone for e in pc.qa_bank.entries())
    pc.close()
    other.close()



def test_an_answer_stored_between_a_removals_forgetting_and_its_delete_goes(tmp_path: Path) -> None:
    # another handle answers after the removal forgot what was built on the chunk but before it
    # deleted the chunk's rows: its own check still resolves the chunk, so the removal must look again
    pc, other = _pc(tmp_path), _pc(tmp_path)
    pc.add_documents([SECRET, BEN], scope="me")
    gone = {c.id for c in pc.knowledge.chunks() if c.doc_id == "zz"}
    forget = other.knowledge.before_remove
    answers: list[percache.Answer] = []

    def forget_then_answer(ids: frozenset[str]) -> None:
        forget(ids)
        answers.append(pc.ask(Q, scope="me", **GEN))

    other.knowledge.before_remove = forget_then_answer
    other.knowledge.remove_document("zz", "me")
    assert answers[0].source == "generated" and set(answers[0].sources) & gone  # the premise
    assert not any(set(e.sources) & gone for e in pc.qa_bank.entries())
    stores = pc.engine.ctx.every_store()
    assert not any(n.extra.get("chunk") in gone for s in stores for n in s.nodes())
    pc.close()
    other.close()
    assert files_holding(tmp_path, NEEDLES) == []


def test_settings_changed_while_a_task_runs_apply_after_it_and_bind_its_answer_to_the_old(tmp_path: Path) -> None:
    # configure() waits for the task (the engine's lock): the answer it stores was generated and
    # is bound under the old system prompt, so a question under the new one is not served it
    pc = _pc(tmp_path)
    pc.add_documents([SECRET, BEN], scope="me")
    pc.idle_queue.push("answer", Q, "me")
    pause, worker = _worker_held_at_its_first_request(pc)
    configurer = threading.Thread(target=pc.configure, kwargs={"system_prompt": "Answer in French."})
    configurer.start()
    configurer.join(0.2)
    assert configurer.is_alive()  # waits for the task
    pause.go.set()
    configurer.join(30)
    pc.stop_idle_worker()
    assert worker.errors == [] and pc.config.system_prompt == "Answer in French."
    assert [e.question for e in pc.qa_bank.entries()] == [Q]
    again = pc.ask(Q, scope="me", **GEN)
    assert again.source == "generated"
    pc.close()


def test_closing_while_a_task_runs_stops_it_and_keeps_it_queued(tmp_path: Path) -> None:
    pc = _pc(tmp_path)
    pc.add_documents([SECRET, BEN], scope="me")
    pc.idle_queue.push("answer", Q, "me")
    pause, _ = _worker_held_at_its_first_request(pc)
    closer = threading.Thread(target=pc.close)
    closer.start()
    while not pc.engine.preemption.flag.is_set():  # the worker is told to stop
        closer.join(0.005)
    pause.go.set()
    closer.join(60)
    assert not closer.is_alive() and pc.engine.closed
    pc = _pc(tmp_path)
    assert pc.qa_bank.entries() == []  # the answer was not stored halfway
    assert [(t.kind, t.question) for t in pc.idle_queue.pending()] == [("answer", Q)]
    pc.idle()
    assert [e.question for e in pc.qa_bank.entries()] == [Q]
    pc.close()


class RemoveAndPreemptOnce:
    """Once the worker's first request has computed its prompt: another handle removes document
    ``zz`` and a foreground call arrives (the flag), so the decode stops after one token."""

    def __init__(self, pc: percache.PerCache, other: percache.PerCache) -> None:
        self.pc, self.other, self.done = pc, other, threading.Event()

    @hookimpl
    def percache_draft_sources(self, ctx: object, prompt: object, hints: object) -> None:
        if self.pc.engine.preemption.in_background() and not self.done.is_set():
            self.other.knowledge.remove_document("zz", "me")
            self.pc.engine.preemption.flag.set()
            self.done.set()


def test_kv_a_preempted_answer_stored_for_a_chunk_removed_meanwhile_goes(tmp_path: Path) -> None:
    pc, other = _pc(tmp_path), _pc(tmp_path)
    pc.configure(drafting=True)
    pc.add_documents([SECRET, BEN], scope="me")
    gone = {c.id for c in pc.knowledge.chunks() if c.doc_id == "zz"}
    pc.idle_queue.push("answer", Q, "me")
    hook = RemoveAndPreemptOnce(pc, other)
    pc.plugins.register(hook)
    worker = pc.start_idle_worker(poll_s=0.01)
    assert hook.done.wait(30)
    for _ in range(6000):  # the worker stopped the task (the flag stays up until cleared)
        if worker.report.preempted:
            break
        threading.Event().wait(0.01)
    pc.stop_idle_worker()
    assert worker.report.preempted == 1 and worker.errors == []
    stores = pc.engine.ctx.every_store()
    assert not any(n.extra.get("chunk") in gone for s in stores for n in s.nodes())
    pc.close()
    other.close()
