"""What a server job reports about its sources."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.server.jobs import _snippets, run_ids
from percache_plugin.server.requests import Sampling
from percache_plugin.server.stream import TextStream
from tests.helpers import tiny_pair
from tests.plugins.test_banks import ListKnowledge


def test_source_texts_come_from_whichever_retrieval_plugin_knows_the_chunks() -> None:
    """With the built-in knowledge bank replaced, the sources' texts are resolved through the
    hooks (reading the built-in bank raised LookupError), and an unknown id gives ""."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    pc.plugins.unregister(name="percache_plugin.plugins.banks:KnowledgeRetrieval")
    own = ListKnowledge(pc.assistant.embedder.dim)
    pc.plugins.register(own)
    pc.add_documents(["Ana: rehearsal on Friday. " * 20], scope="work")
    first, gone = _snippets(pc, ["own-0", "nowhere"])
    assert first.startswith("Ana: rehearsal on Friday.") and first.endswith("…") and len(first) <= 161
    assert gone == ""
    pc.close()


def test_sources_are_resolved_in_one_hook_call() -> None:
    """All ids in one call; one call per id only when a plugin does not know one of them."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    pc.add_documents(["Ana: rehearsal on Friday.", "Ben: budget on Monday.", "Cy: trip in May."],
                     scope="work")
    ids = pc.knowledge.chunk_ids()
    assert len(ids) == 3
    calls: list[list[str]] = []

    class Spy:
        @percache.hookimpl(wrapper=True)
        def percache_resolve_chunks(self, ctx: object, ids: list[str]) -> Generator[None, object, object]:
            calls.append(list(ids))
            return (yield)

    pc.plugins.register(Spy())
    texts = _snippets(pc, ids)
    assert calls == [list(ids)]
    assert sorted(texts) == ["Ana: rehearsal on Friday.", "Ben: budget on Monday.", "Cy: trip in May."]
    calls.clear()
    assert _snippets(pc, [ids[0], "nowhere"]) == (texts[0], "")
    assert calls == [[ids[0], "nowhere"], [ids[0]], ["nowhere"]]
    pc.close()


class _CountedLock:
    """An RLock that numbers its holds (outermost acquisitions), to tell whether two reads
    happened under one hold of the model's lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self.holds = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        ok = self._lock.acquire(blocking, timeout)
        if ok:
            self._depth += 1
            self.holds += self._depth == 1
        return ok

    def release(self) -> None:
        self._depth -= 1
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Reads:
    """The engine's fingerprint tracker, noting the lock hold of every read."""

    def __init__(self, tracker: Any, lock: _CountedLock) -> None:
        self.tracker, self.lock = tracker, lock
        self.holds: list[int] = []

    def current(self) -> str:
        self.holds.append(self.lock.holds)
        return str(self.tracker.current())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tracker, name)


@pytest.mark.parametrize("scope", ["alice", None])
def test_a_request_keys_its_blocks_under_the_lock_it_generates_under(scope: str | None) -> None:
    """The scope's key root chains the fingerprint of the weights in use: it is read in the
    same hold of the model's lock as the generation, so weights changed by another thread in
    between cannot key the blocks by other weights than those that computed them (the read was
    a hold of its own before; unscoped requests go through ``Engine.complete``, which had the
    same gap)."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    try:
        lock = _CountedLock()
        pc.engine.lock = lock
        reads = _Reads(pc.engine.tracker, lock)
        pc.engine.tracker = reads
        ids = list(tok("Notes: the budget review is on Monday. " * 4, add_special_tokens=True)["input_ids"])
        out = run_ids(pc, ids, scope, Sampling(temperature=0), 3, TextStream(tok, len(ids)),
                      time.perf_counter(), 0.0)
        assert out.completion_tokens == 3 and len(reads.holds) >= 2
        assert len(set(reads.holds)) == 1, f"fingerprint read in lock holds {reads.holds}"
    finally:
        pc.close()
