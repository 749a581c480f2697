"""A fact forgotten while a request that recalled it is running, in this handle or another:
nothing that request builds on the fact outlives the forget (its K/V, its stored answer, the
saved session's region or turn ids). A session deleted as its turn ends: the turn is not
extracted afterwards."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from tests.helpers import tiny_pair

SECRET = "Zorblax the locker code is 4417 quartz"
ASK = "What is the Zorblax locker code?"


class Pause:
    """A streamer that holds the generation at its first token until ``go`` is set."""

    def __init__(self) -> None:
        self.paused, self.go = threading.Event(), threading.Event()

    def put(self, value: Any) -> None:
        if not self.paused.is_set():
            self.paused.set()
            assert self.go.wait(30)

    def end(self) -> None:
        pass


def _forget_while_running(pc: Any, fact_id: str, request: Callable[[Pause], Any]) -> tuple[Any, Any]:
    """Run ``request`` in a thread and forget ``fact_id`` while it generates: the fact's rows,
    K/V and answers go, then the forget waits for the request to end (the sessions' listeners
    take the engine's lock)."""
    pause, out = Pause(), {}
    reached = threading.Event()
    pc.memory.forgotten.insert(0, lambda _: reached.set())  # the rows and K/V are gone by then
    worker = threading.Thread(target=lambda: out.setdefault("reply", request(pause)))
    worker.start()
    assert pause.paused.wait(30)
    forget = threading.Thread(target=lambda: out.setdefault("report", pc.memory.forget(fact_id)))
    forget.start()
    assert reached.wait(30)
    pause.go.set()
    worker.join(30)
    forget.join(30)
    return out["reply"], out["report"]


def _fact_nodes(pc: Any, fact_id: str) -> list[str]:
    return [n.key for n in pc.store.nodes() if n.extra.get("chunk") == fact_id]


def test_a_spliced_fact_forgotten_during_the_turn_that_recalled_it_keeps_no_kv(tmp_path: Path) -> None:
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path, embedder="hash", predict="off", memory_recall=True,
                         memory_threshold=0.0, memory_recall_mode="splice")
    try:
        fact = pc.memory.add(SECRET, scope="me").fact
        pc.memory.add("Zorblax owns a red bicycle", scope="me")
        pc.memory.add("Bob repairs old radios", scope="me")
        pc.sessions.create("s", system="Be brief.")
        reply, report = _forget_while_running(pc, fact.id, lambda pause: pc.chat(
            ASK, session="s", memory_scope="me", max_new_tokens=3, streamer=pause))
        assert fact.id in reply.stats.fact_ids and reply.stats.memory_facts_stored >= 1
        assert report.fact_id == fact.id
        assert _fact_nodes(pc, fact.id) == []  # the K/V the turn stored after the rows went
        assert fact.id not in [f.fact_id for f in pc.sessions.get("s").memory]
    finally:
        pc.close()


@pytest.mark.parametrize("on_disk", [False, True])
def test_an_answer_built_on_a_fact_forgotten_while_it_was_generated_is_not_served(
        tmp_path: Path, on_disk: bool) -> None:
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path if on_disk else None, embedder="hash",
                         answer_grounding=False, predict="off", relevance_threshold=None, memory_threshold=0.0)
    try:
        fact = pc.memory.add(SECRET, scope="me").fact
        pc.memory.add("Zorblax owns a red bicycle", scope="me")
        answer, _ = _forget_while_running(pc, fact.id, lambda pause: pc.ask(
            ASK, scope="me", max_new_tokens=3, streamer=pause))
        assert fact.id in answer.sources and fact.id in answer.not_stored
        again = pc.ask(ASK, scope="me", max_new_tokens=3)
        assert again.source == "generated" and fact.id not in again.sources
        assert _fact_nodes(pc, fact.id) == []
    finally:
        pc.close()


def test_a_sampled_answer_on_a_fact_forgotten_while_it_ran_leaves_no_kv(tmp_path: Path) -> None:
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path, embedder="hash", answer_grounding=False,
                         predict="off", relevance_threshold=None, memory_threshold=0.0)
    try:
        fact = pc.memory.add(SECRET, scope="me").fact
        pc.memory.add("Zorblax owns a red bicycle", scope="me")
        answer, _ = _forget_while_running(pc, fact.id, lambda pause: pc.ask(
            ASK, scope="me", max_new_tokens=3, do_sample=True, streamer=pause))
        assert fact.id in answer.sources and answer.not_stored  # a sample is never stored
        assert _fact_nodes(pc, fact.id) == []
    finally:
        pc.close()


def test_a_session_deleted_as_its_turn_ends_is_not_extracted_afterwards(tmp_path: Path) -> None:
    pc = percache.enable(*tiny_pair("llama"), store=tmp_path, embedder="hash", predict="off",
                         memory_extraction="raw", prediction_quiet_s=0.0)
    try:
        pc.sessions.create("gone")
        queue = pc.memory.after_turn
        deleting = threading.Thread(target=pc.sessions.delete, args=("gone",))

        def delete_first(*args: Any) -> None:
            """The delete is asked for just before the turn is queued (and ends first unless
            the turn holds the session's lock while it queues)."""
            deleting.start()
            deleting.join(1.0)
            queue(*args)

        pc.memory.after_turn = pc.sessions.memory.after_turn = delete_first  # type: ignore[method-assign]
        pc.chat("My vault combination is 8812 obsidian.", session="gone", max_new_tokens=2)
        deleting.join(30)
        pc.idle()
        assert pc.sessions.names() == ["default"]
        assert [f.text for s in pc.memory.scopes() for f in pc.memory.list(s)] == []
    finally:
        pc.close()


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    return [f"{p.name}: {n[:24]!r}" for p in root.rglob("*") if p.is_file()
            for n in needles if n in p.read_bytes().lower()]


@pytest.mark.parametrize("mode", ["text", "splice"])
def test_a_fact_forgotten_by_another_handle_during_a_turn_that_recalled_it_is_not_saved_back(
        tmp_path: Path, mode: str) -> None:
    model, tok = tiny_pair("llama")
    config: dict[str, Any] = dict(store=tmp_path, embedder="hash", predict="off", memory_recall=True,
                                  memory_threshold=0.0, memory_recall_mode=mode)
    forgetting = percache.enable(model, tok, **config)
    chatting = percache.enable(copy.deepcopy(model), tok, **config)
    try:
        fact = forgetting.memory.add(SECRET, scope="me").fact
        forgetting.memory.add("Zorblax owns a red bicycle", scope="me")
        forgetting.memory.add("Bob repairs old radios", scope="me")
        chatting.sessions.create("s", system="Be brief.")
        pause, out = Pause(), {}
        worker = threading.Thread(target=lambda: out.setdefault("reply", chatting.chat(
            ASK, session="s", memory_scope="me", max_new_tokens=3, streamer=pause)))
        worker.start()
        assert pause.paused.wait(30)
        forgetting.memory.forget(fact.id)  # cannot wait for the other handle's turn
        pause.go.set()
        worker.join(30)
        assert fact.id in out["reply"].stats.fact_ids
        ids = tok(SECRET, add_special_tokens=False)["input_ids"]
        needles = [json.dumps(ids)[1:-1].encode(), b"4417 quartz"]
        assert _files_holding(tmp_path, needles) == []
        assert _fact_nodes(forgetting, fact.id) == []
        assert SECRET not in tok.decode(chatting.sessions.get("s").ids)
    finally:
        chatting.close()
        forgetting.close()
    assert _files_holding(tmp_path, needles) == []


class _DeletingEmbedder:
    """The hash embedder, deleting a session the first time it embeds a text naming ``word``:
    while an extraction stores the facts it found (after its check that the task is queued)."""

    def __init__(self, word: str, delete: Callable[[], object]) -> None:
        from percache_plugin.rag.embeddings import HashEmbedder

        self.inner, self.word, self.delete, self.deleted = HashEmbedder(), word, delete, False
        self.name, self.dim = self.inner.name, self.inner.dim

    def embed(self, texts: list[str]) -> Any:
        if not self.deleted and any(self.word in t for t in texts):
            self.deleted = True
            self.delete()
        return self.inner.embed(texts)


def test_a_session_deleted_while_its_extraction_stores_leaves_no_fact(tmp_path: Path) -> None:
    holder: dict[str, Any] = {}
    embedder = _DeletingEmbedder("obsidian", lambda: holder["pc"].sessions.delete("gone"))
    pc = holder["pc"] = percache.enable(*tiny_pair("llama"), store=tmp_path, embedder=embedder, predict="off",
                                        memory_extraction="raw", prediction_quiet_s=0.0)
    try:
        pc.sessions.create("gone")
        pc.chat("My vault combination is 8812 obsidian.", session="gone", max_new_tokens=2)
        pc.idle()
        assert embedder.deleted and pc.sessions.names() == ["default"]
        assert [f.text for s in pc.memory.scopes() for f in pc.memory.list(s, superseded=True)] == []
        assert _files_holding(tmp_path, [b"8812 obsidian"]) == []
    finally:
        pc.close()
