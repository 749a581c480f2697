"""Another handle or process removes (or replaces) a document between the retrieval of a
question and the moment ask() records which of the retrieved chunks resolve, or between an
idle task resolving a chunk and its prefill: neither the answer built on the removed chunk nor
its K/V may stay in the store. The interleavings are driven by hook wrappers, not by timing;
the second handle stands for another process."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.assistant.idle_tasks import BUILTIN_TASKS
from percache_plugin.hooks.specs import hookimpl
from percache_plugin.idle import IdleReport, IdleTask
from tests.assistant.test_assistant import BEN, GEN, _pc
from tests.assistant.test_removal_traces import REMOVALS, SECRET, Q


class Once:
    """Runs ``action`` the first time :meth:`fire` is called."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action: Callable[[], object] | None = action

    def fire(self) -> None:
        action, self.action = self.action, None
        if action is not None:
            action()


def _two(tmp_path: Path, docs: list[dict[str, str]], **settings: Any
         ) -> tuple[percache.PerCache, percache.PerCache, set[str]]:
    """Two handles on one store, ``docs`` added by the first; the ids of SECRET's chunks."""
    a, b = _pc(tmp_path / "s"), _pc(tmp_path / "s")
    if settings:
        a.configure(**settings)
    a.add_documents(docs, scope="me")
    return a, b, {c.id for c in a.knowledge.chunks() if c.doc_id == "zz"}


def _no_kv_and_close(a: percache.PerCache, b: percache.PerCache, secret: set[str]) -> None:
    nodes = [n.key for n in b.engine.store.nodes() if n.extra.get("chunk") in secret]
    assert not nodes, "the removed chunk's K/V is kept"
    a.close()
    b.close()


class AfterRetrieval(Once):
    """Runs the action right after the first retrieval returns."""

    @hookimpl(wrapper=True)
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: Any) -> Generator[None, Any, Any]:
        chunks = yield
        self.fire()
        return chunks


@pytest.mark.parametrize("change", sorted(REMOVALS))
def test_an_answer_on_a_chunk_removed_right_after_its_retrieval_is_not_kept(tmp_path: Path, change: str) -> None:
    a, b, secret = _two(tmp_path, [SECRET, BEN])
    a.plugins.register(AfterRetrieval(lambda: REMOVALS[change](b)))
    answer = a.ask(Q, scope="me", **GEN)
    assert secret & set(answer.sources)  # the premise: generated from the chunk b removed
    for pc in (a, b):
        kept = [e for e in pc.qa_bank.entries() if secret & set(e.sources)]
        assert not kept, f"answers built on the removed chunk kept: {kept}"
    _no_kv_and_close(a, b, secret)


class AfterFirstResolve(Once):
    """Runs the action right after the first ``percache_resolve_chunks`` returns (an idle task
    resolving the chunk it prefills)."""

    @hookimpl(wrapper=True)
    def percache_resolve_chunks(self, ctx: Any, ids: Any) -> Generator[None, Any, Any]:
        found = yield
        self.fire()
        return found


@pytest.mark.parametrize("change", sorted(REMOVALS))
def test_a_chunk_removed_right_after_an_idle_task_resolved_it_leaves_no_kv(tmp_path: Path, change: str) -> None:
    a, b, secret = _two(tmp_path, [SECRET], kv_warm=True)
    assert [t.kind for t in a.idle_queue.pending()] == ["warm"]
    a.plugins.register(AfterFirstResolve(lambda: REMOVALS[change](b)))
    a.idle()  # the warm task resolves the chunk, b removes it, the prefill stores its K/V
    _no_kv_and_close(a, b, secret)


def test_a_chunk_removed_while_its_abstract_is_computed_leaves_no_kv(tmp_path: Path) -> None:
    # the abstract task prompts with the chunks it resolved: the K/V it stores for one another
    # handle removed meanwhile goes with the predictions built on it
    a, b, secret = _two(tmp_path, [SECRET, BEN], predict="knowledge")
    assert secret & set(a.prediction_state.pending("me"))  # the premise: the abstract reads it
    a.plugins.register(AfterFirstResolve(lambda: b.knowledge.remove_document("zz", "me")))
    BUILTIN_TASKS["abstract"](a.assistant.idle_context, IdleTask(0, "abstract", "", "me", 0.0), IdleReport())
    _no_kv_and_close(a, b, secret)


class SpendBudgetBeforeDecode:
    """Spends the idle budget once the prompt is prefilled (the decode's next check stops it)."""

    def __init__(self, pc: percache.PerCache) -> None:
        self.pc = pc

    @hookimpl(wrapper=True)
    def percache_draft_sources(self, ctx: Any, prompt: Any, hints: Any) -> Generator[None, Any, Any]:
        self.pc.engine.preemption.deadline = 0.0
        return (yield)


def test_an_interrupted_idle_answer_on_a_chunk_removed_before_it_resolved_leaves_no_kv(tmp_path: Path) -> None:
    # removed between the task's retrieval and its resolve, and the request stopped part way (a
    # spent budget: the prompt's K/V is stored before the decode stops): the chunk is checked
    # by retrieval again on the way out too, as after a request that ends
    a, b, secret = _two(tmp_path, [SECRET, BEN])
    a.idle_queue.push("answer", Q, "me")
    a.plugins.register(AfterRetrieval(lambda: b.knowledge.remove_document("zz", "me")))
    a.plugins.register(SpendBudgetBeforeDecode(a))
    assert a.idle(budget_s=600, max_tasks=1).preempted  # the premise: stopped part way
    _no_kv_and_close(a, b, secret)
