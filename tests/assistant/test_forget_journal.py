"""A forget that fails part way (a K/V deletion that raises, a process killed between its
steps) is completed later, by the journal (``forget_journal``): no K/V of a removed
chunk or a forgotten fact stays once the handle reconciles or the store is opened again, and
nothing that still resolves is deleted.

The failing deletion is a real failed write: a trigger in the store's database aborts every
delete of a K/V row while the test keeps it (the store logs and counts the failure, as for a
full disk). Interleavings are driven by hook wrappers, not by timing; the second handle stands
for another process."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.cli import main
from percache_plugin.hooks.specs import hookimpl
from percache_plugin.kv.store import DB_NAME
from percache_plugin.plugins.removal import forget_chunks
from percache_plugin.rag.chunking import Chunk
from tests.assistant.test_assistant import BEN, GEN, _pc
from tests.assistant.test_removal_traces import SECRET, Q
from tests.assistant.test_removed_before_check import AfterRetrieval

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def failing_kv_deletes(store: Path) -> Iterator[None]:
    """Every deletion of a K/V row in ``store`` fails inside the block."""
    db = sqlite3.connect(store / DB_NAME, isolation_level=None)
    db.execute("CREATE TRIGGER IF NOT EXISTS test_fail_kv_delete BEFORE DELETE ON kv_nodes "
               "BEGIN SELECT RAISE(ABORT, 'injected write failure'); END")
    try:
        yield
    finally:
        db.execute("DROP TRIGGER IF EXISTS test_fail_kv_delete")
        db.close()


def kv_of(pc: percache.PerCache, ids: set[str]) -> list[str]:
    return [n.key for n in pc.engine.store.nodes() if n.extra.get("chunk") in ids]


def _removed_while_asked(tmp_path: Path) -> tuple[percache.PerCache, percache.PerCache, set[str],
                                                    contextlib.ExitStack]:
    """Handle ``a`` asks; right after its retrieval handle ``b`` removes SECRET, and from then on
    K/V deletions fail: ``a`` stores the K/V of the removed chunk and cannot delete it."""
    a, b = _pc(tmp_path / "s"), _pc(tmp_path / "s")
    a.add_documents([SECRET, BEN], scope="me")
    secret = {c.id for c in a.knowledge.chunks() if c.doc_id == "zz"}
    failing = contextlib.ExitStack()
    a.plugins.register(AfterRetrieval(lambda: (b.knowledge.remove_document("zz", "me"),
                                               failing.enter_context(failing_kv_deletes(tmp_path / "s")))))
    answer = a.ask(Q, scope="me", **GEN)
    assert secret & set(answer.sources)  # the premise: generated from the chunk b removed
    assert kv_of(a, secret), "the premise: the failed deletion left the removed chunk's K/V"
    assert a.engine.store.write_errors  # the store logged and counted it; the request went on
    return a, b, secret, failing


@pytest.mark.parametrize("reconcile", ["ask", "idle", "reopen"])
def test_a_kv_deletion_that_failed_once_is_completed(tmp_path: Path, reconcile: str) -> None:
    a, b, secret, failing = _removed_while_asked(tmp_path)
    failing.close()  # the disk has room again
    if reconcile == "ask":
        a.ask("Who reviews the budget?", scope="me", **GEN)
    elif reconcile == "idle":
        a.idle()
    else:
        a.close()
        a = _pc(tmp_path / "s")
    assert not kv_of(a, secret), "the removed chunk's K/V stayed"
    assert not kv_of(b, secret)
    assert a.stats().forgets_rerun + b.stats().forgets_rerun >= 1
    assert not a.assistant.forget_journal.pending()
    a.close()
    b.close()


def test_a_rerun_that_fails_again_is_counted_and_tried_later(tmp_path: Path) -> None:
    a, b, secret, failing = _removed_while_asked(tmp_path)
    a.assistant.forget_journal.recover(force=True)  # still failing
    assert a.stats().forgets_rerun_failed == 1 and kv_of(a, secret)
    with pytest.raises(OSError, match="deletion.s. of K/V nodes"):  # a direct caller sees it
        forget_chunks(a.assistant.ctx, secret)
    assert a.assistant.forget_journal.recover() == 0  # backing off: not tried again at once
    failing.close()
    assert a.assistant.forget_journal.recover(force=True) == 1
    assert not kv_of(a, secret) and a.stats().forgets_rerun == 1
    a.close()
    b.close()


def _fact_in_kv(tmp_path: Path) -> tuple[percache.PerCache, str]:
    """A handle whose K/V store holds the K/V of a fact (recalled by ask()); the fact's id."""
    pc = _pc(tmp_path / "s")
    pc.configure(memory_in_ask=True, memory_threshold=0.0, relevance_threshold=None)
    fact = pc.memory.add("Zorblax opens the quartz locker on Tuesdays.", scope="me").fact
    pc.add_documents([BEN], scope="me")
    assert fact.id in pc.ask(Q, scope="me", **GEN).sources
    return pc, fact.id


def test_a_fact_whose_kv_deletion_failed_is_forgotten_at_the_next_ask(tmp_path: Path) -> None:
    pc, fact_id = _fact_in_kv(tmp_path)
    assert kv_of(pc, {fact_id})  # the premise: the fact's K/V is stored
    with failing_kv_deletes(tmp_path / "s"), contextlib.suppress(OSError):  # raised, and journaled
        pc.memory.forget(fact_id)
    assert kv_of(pc, {fact_id})  # the fact is gone (tombstoned), its K/V not yet
    pc.ask("Who reviews the budget?", scope="me", **GEN)
    assert not kv_of(pc, {fact_id}), "the forgotten fact's K/V stayed"
    assert pc.stats().forgets_rerun == 1
    pc.close()


def test_a_cli_forget_cut_short_is_completed_by_the_next_handle(tmp_path: Path) -> None:
    pc, fact_id = _fact_in_kv(tmp_path)
    pc.close()
    with failing_kv_deletes(tmp_path / "s"), contextlib.suppress(OSError):  # `percache memory forget`
        assert main(["memory", "forget", str(tmp_path / "s"), fact_id]) != 0
    pc = _pc(tmp_path / "s")
    assert not kv_of(pc, {fact_id}), "the forgotten fact's K/V stayed"
    assert pc.stats().forgets_rerun == 1
    pc.close()


KILLED = """
import os, signal, sys
sys.path.insert(0, {repo!r})
import torch
torch.set_num_threads(1)
from percache_plugin.cli import main
from percache_plugin.hooks.specs import hookimpl
from tests.assistant.test_assistant import BEN, GEN, _pc
from tests.assistant.test_removal_traces import SECRET, Q
from tests.assistant.test_removed_before_check import AfterRetrieval

class KillAfterAnswers:
    armed = False

    @hookimpl(wrapper=True)
    def percache_sources_forgotten(self, ctx, ids):
        deleted = yield  # the answers built on the chunk are deleted: die before its K/V goes
        if self.armed:
            os.kill(os.getpid(), signal.SIGKILL)
        return deleted

a, b = _pc(sys.argv[1]), _pc(sys.argv[1])
a.add_documents([SECRET, BEN], scope="me")
killer = KillAfterAnswers()
a.plugins.register(killer)

def remove():
    b.knowledge.remove_document("zz", "me")
    killer.armed = True

a.plugins.register(AfterRetrieval(remove))
a.ask(Q, scope="me", **GEN)
print("not killed", flush=True)
"""


def test_a_process_killed_between_the_answers_and_the_kv_leaves_no_kv_after_reopening(tmp_path: Path) -> None:
    store = tmp_path / "s"
    run = subprocess.run([sys.executable, "-c", KILLED.format(repo=str(REPO)), str(store)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -9, run.stdout + run.stderr  # SIGKILL, midway through the forget
    with sqlite3.connect(store / DB_NAME) as db:  # the premise: K/V of the removed chunk stayed
        extras = [json.loads(e or "{}").get("chunk") for (e,) in db.execute("SELECT extra FROM kv_nodes")]
    pc = _pc(store)
    secret = set(extras) - {c.id for c in pc.knowledge.chunks()} - {None}
    assert secret, "the premise: the killed process left K/V of a removed chunk"
    assert not kv_of(pc, secret), "K/V of the removed chunk stayed after reopening"
    assert not any(secret & set(e.sources) for e in pc.qa_bank.entries())
    assert pc.stats().forgets_rerun == len(secret)
    pc.close()


class ToggledRetriever:
    """A retriever plugin with one chunk of its own, which resolves only through this plugin
    (and not while ``gone``)."""

    def __init__(self) -> None:
        self.chunk = Chunk(id="plug-1", doc_id="plug", text=SECRET["text"], index=0, scope="me")
        self.gone = False

    @hookimpl
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: str | None) -> list[Chunk]:
        return [self.chunk] if scope == "me" else []

    @hookimpl(tryfirst=True)
    def percache_resolve_chunks(self, ctx: Any, ids: Sequence[str]) -> list[Chunk] | None:
        return None if self.gone or list(ids) != [self.chunk.id] else [self.chunk]


class GoneWhileGenerating:
    """Makes ``plugin``'s chunk unresolvable when the first K/V is stored, with K/V deletions
    failing from then on, until :meth:`back`."""

    def __init__(self, plugin: ToggledRetriever, store: Path) -> None:
        self.plugin, self.store = plugin, store
        self.failing = contextlib.ExitStack()

    @hookimpl(wrapper=True)
    def percache_store_chunk(self, key: str) -> Generator[None, Any, Any]:
        result = yield
        if not self.plugin.gone:
            self.plugin.gone = True
            self.failing.enter_context(failing_kv_deletes(self.store))
        return result

    def back(self) -> None:
        self.plugin.gone = False
        self.failing.close()


@pytest.mark.parametrize("how", ["identical text added again", "a plugin's chunk"])
def test_what_resolves_again_is_not_deleted(tmp_path: Path, how: str) -> None:
    # a forget that failed leaves a row; by the time it is run again its chunk resolves again:
    # the chunk's K/V is valid and stays (only the row goes)
    if how == "a plugin's chunk":
        pc = _pc(tmp_path / "s")
        pc.configure(relevance_threshold=None)
        plugin = ToggledRetriever()
        pc.plugins.register(plugin)
        toggle = GoneWhileGenerating(plugin, tmp_path / "s")
        pc.plugins.register(toggle)
        pc.ask(Q, scope="me", **GEN)
        ids, other = {plugin.chunk.id}, pc
        toggle.back()
    else:
        pc, other, ids, failing = _removed_while_asked(tmp_path)
        other.add_documents([SECRET], scope="me")  # the same text again: the same chunk id
        failing.close()
    assert kv_of(pc, ids) and pc.assistant.forget_journal.pending()  # the premise
    pc.assistant.forget_journal.recover(force=True)
    assert kv_of(pc, ids), "the K/V of a chunk that resolves was deleted"
    assert not pc.assistant.forget_journal.pending()
    assert pc.stats().forgets_rerun == 0 and pc.assistant.forget_journal.counts.resolved_again == 1
    pc.close()
    if other is not pc:
        other.close()
