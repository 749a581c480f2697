"""Built-in bank plugins own their banks; a third-party retrieval replaces the knowledge bank."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import percache_plugin as percache
from percache_plugin.assistant.ask import QA_DRAFT_SIMILARITY
from percache_plugin.rag.chunking import Chunk
from percache_plugin.rag.knowledge import AddReport
from percache_plugin.rag.qa_types import LookupResult, QAEntry
from tests.helpers import tiny_pair
from tests.rag.test_qa_bank import CountingEmbedder

GEN = {"max_new_tokens": 3}


def _chunk(cid: str, text: str) -> Chunk:
    return Chunk(id=cid, doc_id="external", index=int(cid[-1]), text=text, scope=None)


class ExternalRetrieval:
    """Returns chunks the knowledge bank never saw."""

    def __init__(self) -> None:
        self.chunks = [_chunk("ext-1", "Dana: the tram pass renews on the 3rd."),
                       _chunk("ext-2", "Eli: the boiler service is on Tuesday.")]
        self.queries: list[str] = []

    @percache.hookimpl
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: Any) -> list[Chunk]:
        self.queries.append(query.text)
        return self.chunks[:k]

    @percache.hookimpl
    def percache_resolve_chunks(self, ctx: Any, ids: Sequence[str]) -> list[Chunk] | None:
        known = {c.id: c for c in self.chunks}
        return [known[i] for i in ids] if all(i in known for i in ids) else None


def test_third_party_retrieval_is_answered_with() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    ext = ExternalRetrieval()
    pc.plugins.register(ext)
    answer = pc.ask("When does the tram pass renew?", **GEN)
    assert ext.queries == ["When does the tram pass renew?"]
    assert answer.source == "generated"
    assert answer.sources == ("ext-1", "ext-2")
    assert len(pc.knowledge) == 0  # the built-in bank was never involved
    # The QA bank keeps the external sources; idle work resolves them through the hook.
    [entry] = pc.qa_bank.entries()
    assert entry.sources == ("ext-1", "ext-2")
    assert pc.hooks.resolve_chunks(pc.assistant.ctx, entry.sources) == ext.chunks
    pc.close()


def test_unregistered_qa_bank_is_not_consulted() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    pc.add_documents(["Ana: rehearsal on Friday.", "Ben: budget on Monday."])
    pc.plugins.unregister(name="percache_plugin.plugins.banks:QABankPlugin")
    first = pc.ask("When is the rehearsal?", **GEN)
    second = pc.ask("When is the rehearsal?", **GEN)
    assert first.source == second.source == "generated"  # no bank: nothing served
    with pytest.raises(LookupError, match="not registered"):
        pc.qa_bank  # noqa: B018
    pc.close()


class ListQABank:
    """A QA bank of its own: a list of entries, matched by exact question text."""

    def __init__(self) -> None:
        self.entries: list[QAEntry] = []
        self.calls: list[str] = []

    def _add(self, question: str, answer: str | None, scope: str | None) -> QAEntry:
        entry = QAEntry(id=len(self.entries) + 1, question=question, answer=answer, scope=scope,
                        sources=(), stale=False, hits=0, created=0.0, last_access=0.0,
                        origin="user", nbytes=0)
        self.entries.append(entry)
        return entry

    @percache.hookimpl
    def percache_qa_lookup(self, ctx: Any, query: Any, scope: Any, retrieved: Any) -> LookupResult:
        self.calls.append("lookup")
        return LookupResult(None, None, None)

    @percache.hookimpl
    def percache_qa_store(self, ctx: Any, query: Any, answer: Any, scope: Any, sources: Any,
                          origin: Any) -> None:
        self.calls.append("store")
        self._add(query.text, answer, scope)

    @percache.hookimpl
    def percache_qa_similar(self, ctx: Any, query: Any, scope: Any, tau: float, k: int) -> list[QAEntry]:
        self.calls.append(f"similar {tau}")
        return [e for e in self.entries if e.scope == scope and not e.stale][:k]

    @percache.hookimpl
    def percache_qa_mark_stale(self, ctx: Any, entry_ids: Sequence[int]) -> list[int]:
        self.calls.append(f"mark_stale {list(entry_ids)}")
        self.entries = [dataclasses.replace(e, stale=e.stale or e.id in entry_ids) for e in self.entries]
        return list(entry_ids)

    @percache.hookimpl
    def percache_qa_correct(self, ctx: Any, entry_id: int, answer: str) -> QAEntry:
        self.calls.append(f"correct {entry_id}")
        i = entry_id - 1
        self.entries[i] = dataclasses.replace(self.entries[i], answer=answer, origin="corrected")
        return self.entries[i]

    @percache.hookimpl
    def percache_qa_stats(self, ctx: Any) -> dict[str, object]:
        self.calls.append("stats")
        return {"lookups": 7, "hits": 3}

    @percache.hookimpl
    def percache_configured(self, ctx: Any, changed: frozenset[str]) -> None:
        self.calls.append(f"configured {sorted(changed)}")


def test_a_replacement_qa_bank_gets_every_qa_call() -> None:
    """Drafts, stats, the byte limit, served paraphrases, disputes and corrections all reach a
    replacement QA-bank plugin; the built-in bank is never opened."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off", drafting=True)
    pc.plugins.unregister(name="percache_plugin.plugins.banks:QABankPlugin")
    bank = ListQABank()
    pc.plugins.register(bank)
    pc.add_documents(["Ana: rehearsal on Friday.", "Ben: budget on Monday."])
    bank._add("When is the rehearsal?", "On Friday.", None)
    pc.ask("When is the rehearsal on?", **GEN)
    assert bank.calls[:3] == ["lookup", f"similar {QA_DRAFT_SIMILARITY}", "store"]  # drafts
    assert (pc.stats().qa_lookups, pc.stats().qa_hits) == (7, 3)
    pc.configure(qa_byte_limit=1 << 20)
    assert "configured ['qa_byte_limit']" in bank.calls
    idle = pc.assistant.idle_context
    query = pc.assistant.query("When is the rehearsal?")
    assert [e.id for e in idle.served_paraphrases(query, None)] == [1, 2]
    assert idle.dispute(bank.entries[0]) == 2  # itself and its paraphrase
    assert bank.calls[-1] == "mark_stale [1, 2]"
    assert pc.correct(2, "Friday at six.").answer == "Friday at six."
    assert "correct 2" in bank.calls
    pc.close()


class ListKnowledge:
    """A knowledge bank of its own: one chunk per document, each with a fixed vector."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.chunks: list[Chunk] = []
        self.calls: list[str] = []

    @percache.hookimpl
    def percache_add_documents(self, ctx: Any, docs: Sequence[object], scope: str | None) -> AddReport:
        self.calls.append(f"add {len(docs)} {scope}")
        new = tuple(Chunk(id=f"own-{len(self.chunks) + i}", doc_id="own", index=len(self.chunks) + i,
                          text=str(d), scope=scope) for i, d in enumerate(docs))
        self.chunks.extend(new)
        return AddReport(documents=len(docs), new_chunks=new, duplicate_chunks=0)

    @percache.hookimpl
    def percache_list_chunks(self, ctx: Any, scope: str | None) -> list[str]:
        self.calls.append(f"list {scope}")
        return [c.id for c in self.chunks if scope is None or c.scope == scope]

    @percache.hookimpl
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: Any) -> list[Chunk]:
        self.calls.append("retrieve")
        return [c for c in self.chunks if c.scope == scope][:k]

    @percache.hookimpl
    def percache_resolve_chunks(self, ctx: Any, ids: Sequence[str]) -> list[Chunk] | None:
        known = {c.id: c for c in self.chunks}
        return [known[i] for i in ids] if all(i in known for i in ids) else None

    @percache.hookimpl
    def percache_chunk_vectors(self, ctx: Any, chunks: Sequence[Chunk]) -> dict[str, np.ndarray]:
        self.calls.append(f"vectors {[c.id for c in chunks]}")
        unit = np.ones(self.dim, np.float32) / np.sqrt(self.dim)
        return {c.id: -unit for c in chunks if c.id.startswith("own-")}


def test_a_replacement_knowledge_bank_gets_documents_predictions_and_relevance() -> None:
    """add_documents, predict("knowledge") and ask()'s relevance reach a replacement knowledge
    plugin; the built-in bank is never opened."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off", relevance_threshold=0.5)
    pc.plugins.unregister(name="percache_plugin.plugins.banks:KnowledgeRetrieval")
    own = ListKnowledge(pc.assistant.embedder.dim)
    pc.plugins.register(own)
    report = pc.add_documents(["Ana: rehearsal on Friday.", "Ben: budget on Monday."], scope="work")
    assert [c.id for c in report.new_chunks] == ["own-0", "own-1"]
    # warming (Config.kv_warm) orders the new chunks by the plugin's vectors
    assert own.calls == ["add 2 work", "vectors ['own-0', 'own-1']"]
    assert pc.predict("knowledge", scope="work") > 0
    assert own.calls[-1] == "list work"
    answer = pc.ask("When is the rehearsal?", scope="work", **GEN)
    assert own.calls[-2:] == ["retrieve", "vectors ['own-0', 'own-1']"]
    # The plugin's vectors, not the embedder's: relevance is the cosine with -unit.
    query = pc.assistant.query("When is the rehearsal?").embedding
    expected = float(query @ (-np.ones_like(query) / np.sqrt(query.size)))
    assert answer.relevance == pytest.approx(expected, abs=1e-5)
    assert answer.relevance_embedded == 0
    assert answer.source == "no_documents"  # below the threshold: the plugin's vectors decided
    with pytest.raises(LookupError, match="not registered"):
        pc.knowledge  # noqa: B018
    pc.close()


def test_chunks_no_plugin_knows_are_embedded_for_relevance_and_counted() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    pc.add_documents(["Ana: rehearsal on Friday."])
    ext = ExternalRetrieval()
    pc.plugins.register(ext)
    answer = pc.ask("When does the tram pass renew?", **GEN)
    assert answer.relevance_embedded == 2  # the built-in bank knows neither external chunk
    vectors = pc.assistant.embedder.embed([c.text for c in ext.chunks])
    query = pc.assistant.query("When does the tram pass renew?").embedding
    assert answer.relevance == pytest.approx(float((vectors @ query).max()), abs=1e-5)
    pc.close()


def test_new_documents_check_stored_questions_without_embedding_them_again() -> None:
    embedder = CountingEmbedder(64)
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder=embedder, predict="off", answer_grounding=False, kv_warm=False)
    pc.add_documents([{"id": "ana", "text": "Ana: the choir rehearsal moved to Friday."}], scope="a")
    questions = ["When is the choir rehearsal?", "Who moved the rehearsal?"]
    for q in questions:
        pc.ask(q, scope="a", **GEN)
    embedder.seen.clear()
    pc.add_documents([{"id": "ben", "text": "Ben: the choir rehearsal needs a pianist."}], scope="a")
    assert not set(questions) & set(embedder.seen)  # only the new chunk was embedded
    assert len(pc.qa_bank.entries(scope="a", stale=True)) == 2  # both questions retrieve it now
    pc.close()
