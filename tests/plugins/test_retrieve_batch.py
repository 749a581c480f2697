"""The re-check after a document change retrieves every stored question of the scope in one
``percache_retrieve_batch`` call, unless a plugin takes part in ``percache_retrieve`` without
implementing the batch too: then each question goes through ``percache_retrieve`` (the plugin
is never bypassed)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import percache_plugin as percache
from tests.helpers import tiny_pair

DOCS = [{"text": f"note {i}: the {w} meeting moved to room {i}.", "id": f"d{i}"}
        for i, w in enumerate(["budget", "hiring", "travel", "launch", "design", "safety"])]
QUESTIONS = [f"where is the {w} meeting?" for w in ["budget", "hiring", "travel", "launch", "design"]]


class Counter:
    """Counts calls of both retrieval hooks (implements both: batching stays on)."""

    def __init__(self) -> None:
        self.single = 0
        self.batches: list[int] = []

    @percache.hookimpl(wrapper=True)
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: Any) -> Generator[None, Any, Any]:
        self.single += 1
        return (yield)

    @percache.hookimpl(wrapper=True)
    def percache_retrieve_batch(self, ctx: Any, queries: Any, k: int, scope: Any) -> Generator[None, Any, Any]:
        self.batches.append(len(queries))
        return (yield)


class DropsDocument:
    """Wraps percache_retrieve only: chunks of document ``x`` are never retrieved."""

    def __init__(self) -> None:
        self.calls = 0

    @percache.hookimpl(wrapper=True)
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: Any) -> Generator[None, Any, Any]:
        self.calls += 1
        chunks = yield
        return [c for c in chunks or [] if c.doc_id != "x"]


def _handle(*plugins: object) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off", kv_warm=False,
                         answer_grounding=False, draft_calibrate_idle=False, plugins=list(plugins))
    pc.add_documents(DOCS, scope="s")
    for q in QUESTIONS:  # answers stored directly, sources the question's retrieval now
        sources = [c.id for c in pc.hooks.retrieve(pc.assistant.ctx, pc.assistant.query(q), 3, "s")]
        pc.qa_bank.add(q, "an answer", scope="s", sources=sources)
    return pc


def test_the_recheck_retrieves_every_question_in_one_batch() -> None:
    counter = Counter()
    pc = _handle(counter)
    counter.single, counter.batches = 0, []
    pc.add_documents([{"text": "the budget meeting and the hiring meeting are cancelled.", "id": "x"}],
                     scope="s")
    assert counter.batches == [len(QUESTIONS)] and counter.single == 0
    stale = {e.question for e in pc.qa_bank.entries(stale=True)}
    assert stale  # the premise: the new chunk entered some question's top-k
    pc.close()


def test_a_plugin_wrapping_retrieve_only_sees_every_recheck_question() -> None:
    drops = DropsDocument()
    pc = _handle(drops)
    drops.calls = 0
    pc.add_documents([{"text": "the budget meeting and the hiring meeting are cancelled.", "id": "x"}],
                     scope="s")
    assert drops.calls == len(QUESTIONS)  # one by one, through the wrapper
    for entry in pc.qa_bank.entries():  # stale where the wrapped retrieval moved
        now = pc.hooks.retrieve(pc.assistant.ctx, pc.assistant.query(entry.question), 3, "s")
        assert entry.stale == (set(entry.sources) != {c.id for c in now})
    pc.close()
