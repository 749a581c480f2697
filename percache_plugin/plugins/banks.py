"""Built-in plugins of the ask() pipeline; each owns its component.

:class:`KnowledgeRetrieval` owns the knowledge bank and :class:`QABankPlugin` the QA bank. Both
are opened on first use from the context (the files live beside the K/V store). Unregistering
one and registering a replacement replaces the behaviour: nothing else reads these banks on the
request path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core.query import Query
from ..hooks.specs import hookimpl
from ..kv.store import DB_NAME
from ..predict.forget import built_on
from ..rag.knowledge import KnowledgeBank
from ..rag.qa_bank import QABank
from .answer_binding import answer_model, generation_defaults, same_settings
from .removal import forget_chunks

if TYPE_CHECKING:
    from ..hooks.contexts import AssistantContext
    from ..rag.chunking import Chunk
    from ..rag.knowledge import AddReport
    from ..rag.qa_bank import LookupResult
    from ..rag.qa_length import AnswerTokens
    from ..rag.qa_recheck import Recheck
    from ..rag.qa_types import AllScopes, QAEntry

__all__ = ["answer_model", "KnowledgeRetrieval", "QABankPlugin", "KNOWLEDGE_PLUGIN", "QA_BANK_PLUGIN"]

KNOWLEDGE_PLUGIN = "percache_plugin.plugins.banks:KnowledgeRetrieval"
QA_BANK_PLUGIN = "percache_plugin.plugins.banks:QABankPlugin"


class KnowledgeRetrieval:
    """Hybrid BM25 + embedding search over the knowledge bank this plugin owns."""

    def __init__(self) -> None:
        self._bank: KnowledgeBank | None = None

    def bank(self, ctx: AssistantContext) -> KnowledgeBank:
        """The knowledge bank (opened on first use)."""
        if self._bank is None:
            self._bank = KnowledgeBank(ctx.data_path("knowledge"), ctx.embedder,
                                       chunk_words=ctx.config.chunk_words)
            # journaled until the pass after the removal (``_removed``) completes
            self._bank.before_remove = lambda ids: forget_chunks(ctx, ids, keep=True)
            self._bank.guard = ctx.foreground  # idle work computing from them stops first
            self._bank.after_remove = lambda report: _removed(ctx, report)
        return self._bank

    def set_chunk_words(self, words: int) -> None:
        """Chunk size for documents added from now on (chunks already indexed stay)."""
        if self._bank is not None:
            self._bank.chunk_words = words

    @hookimpl(trylast=True)
    def percache_configured(self, ctx: AssistantContext, changed: frozenset[str]) -> None:
        if "chunk_words" in changed:
            self.set_chunk_words(ctx.config.chunk_words)

    @hookimpl(trylast=True)
    def percache_retrieve(self, ctx: AssistantContext, query: Query, k: int,
                          scope: str | None) -> list[Chunk]:
        bank = self.bank(ctx)
        if len(bank) == 0:
            return []
        return bank.retrieve(query.text, k, scope=scope, query_embedding=query.embedding)

    @hookimpl(trylast=True)
    def percache_retrieve_batch(self, ctx: AssistantContext, queries: Sequence[Query], k: int,
                                scope: str | None) -> list[list[Chunk]]:
        bank = self.bank(ctx)
        if len(bank) == 0:
            return [[] for _ in queries]
        return bank.retrieve_many([(q.text, q.embedding) for q in queries], k, scope=scope)

    @hookimpl(trylast=True)
    def percache_close(self, ctx: AssistantContext) -> None:
        if self._bank is not None:
            self._bank.close()

    @hookimpl(trylast=True)
    def percache_add_documents(self, ctx: AssistantContext, docs: Sequence[object],
                               scope: str | None) -> AddReport:
        return self.bank(ctx).add_documents(docs, scope=scope)  # type: ignore[arg-type]

    @hookimpl(trylast=True)
    def percache_list_chunks(self, ctx: AssistantContext, scope: str | None) -> list[str]:
        return [c.id for c in self.bank(ctx).chunks() if c.scope == scope]

    @hookimpl(trylast=True)
    def percache_chunk_vectors(self, ctx: AssistantContext,
                               chunks: Sequence[Chunk]) -> dict[str, np.ndarray] | None:
        index = self.bank(ctx).index
        # Only chunks this bank indexed with the same text: another retriever may reuse an id.
        mine = [c.id for c in chunks if c.id in index and index.chunk(c.id).text == c.text]
        if not mine:
            return None
        return dict(zip(mine, index.vectors(mine), strict=True))

    @hookimpl(trylast=True)
    def percache_resolve_chunks(self, ctx: AssistantContext, ids: Sequence[str]) -> list[Chunk] | None:
        bank = self.bank(ctx)
        if not all(i in bank.index for i in ids):
            return None
        return [bank.chunk(i) for i in ids]


def _stored_query(ctx: AssistantContext, question: str, vector: np.ndarray | None) -> Query:
    """The query of a stored question: its stored embedding, embedded again when unreadable."""
    return ctx.query(question) if vector is None else Query(question, lambda _: vector[None])


def _removed(ctx: AssistantContext, report: AddReport) -> None:
    """Once chunks are deleted: what was built on them goes again (another handle or process
    may have stored an answer or K/V since the first pass, its own check passing while the
    chunks were still there), and the answers of their scopes are checked against retrieval."""
    forget_chunks(ctx, report.replaced_chunks)
    ctx.hooks.documents_added(ctx, report)


class QABankPlugin:
    """Serve, store and refresh answers through the QA bank this plugin owns."""

    def __init__(self) -> None:
        self._bank: QABank | None = None

    def bank(self, ctx: AssistantContext) -> QABank:
        """The QA bank (opened on first use, in the K/V store's SQLite file)."""
        if self._bank is None:
            root = ctx.engine.store.path
            engine = ctx.engine
            self._bank = QABank(None if root is None else root / DB_NAME, ctx.embedder,
                                byte_limit=ctx.config.qa_byte_limit,
                                model=lambda: answer_model(engine.fingerprint, engine.config, engine.use_template,
                                                                    generation_defaults(engine.generation_config())),
                                share_across_models=lambda: engine.config.qa_share_across_models)
        return self._bank

    @hookimpl(trylast=True)
    def percache_qa_lookup(self, ctx: AssistantContext, query: Query, scope: str | None,
                           retrieved: Sequence[str], max_new_tokens: int | None) -> LookupResult | None:
        if not ctx.config.use_qa_bank:
            return None
        overlap = ctx.config.consistency_min_overlap
        return self.bank(ctx).lookup(
            query.text, tau=ctx.config.similarity_threshold, scope=scope,
            retrieved=None if overlap is None else list(retrieved),
            min_overlap=overlap if overlap is not None else 0.0,
            meaning=ctx.config.meaning_guards, embedding=query.embedding,
            audit=ctx.config.audit_meaning_guards, max_new_tokens=max_new_tokens,
        )

    @hookimpl(trylast=True)
    def percache_qa_entries(self, ctx: AssistantContext, scope: str | None | AllScopes,
                            question: str | None) -> list[QAEntry]:
        entries = self.bank(ctx).entries(scope=scope)
        return entries if question is None else [e for e in entries if e.question == question]

    @hookimpl(trylast=True)
    def percache_qa_known(self, ctx: AssistantContext, query: Query, scope: str | None) -> bool:
        if not ctx.config.use_qa_bank:
            return False
        tau = ctx.config.similarity_threshold
        best = self.bank(ctx).lookup(query.text, tau=tau, scope=scope, embedding=query.embedding).best
        return best is not None and best.similarity >= tau and bool(best.guards.get("terms", True))

    @hookimpl(trylast=True)
    def percache_qa_similar(self, ctx: AssistantContext, query: Query, scope: str | None, tau: float,
                            k: int) -> list[QAEntry]:
        matches = self.bank(ctx).similar(query.text, tau=tau, scope=scope, embedding=query.embedding, k=k)
        return [m.entry for m in matches]

    @hookimpl(trylast=True)
    def percache_qa_mark_stale(self, ctx: AssistantContext, entry_ids: Sequence[int]) -> list[int]:
        return self.bank(ctx).mark_stale(entry_ids)

    @hookimpl(trylast=True)
    def percache_qa_correct(self, ctx: AssistantContext, entry_id: int, answer: str) -> QAEntry:
        return self.bank(ctx).correct(entry_id, answer)

    @hookimpl(trylast=True)
    def percache_qa_stats(self, ctx: AssistantContext) -> dict[str, object]:
        if self._bank is None:  # not opened: nothing was looked up (and the embedder stays unloaded)
            return {"lookups": 0, "hits": 0}
        return self._bank.stats()

    @hookimpl(trylast=True)
    def percache_configured(self, ctx: AssistantContext, changed: frozenset[str]) -> None:
        if "qa_byte_limit" in changed:  # evicts at once, also rows stored by earlier sessions
            self.bank(ctx).set_byte_limit(ctx.config.qa_byte_limit)

    @hookimpl(trylast=True)
    def percache_qa_store(self, ctx: AssistantContext, query: Query, answer: str | None,
                          scope: str | None, sources: Sequence[str], origin: str,
                          tokens: AnswerTokens | None) -> None:
        if ctx.config.use_qa_bank:
            self.bank(ctx).add(query.text, answer, scope=scope, sources=list(sources),
                               origin=origin, embedding=query.embedding,  # type: ignore[arg-type]
                               tokens=tokens)

    @hookimpl(trylast=True)
    def percache_sources_forgotten(self, ctx: AssistantContext, ids: Sequence[str]) -> int:
        gone = set(ids)
        bank = self.bank(ctx)
        state = ctx.prediction_state  # questions predicted from the chunks are built on them too
        predicted = set() if state is None else state.predicted_from(gone)
        deleted = sum(bank.delete(entry_id) for entry_id in built_on(bank.entries(), gone, predicted))
        if deleted:  # the database file keeps the deleted answers until its WAL is checkpointed
            bank.scrub()
        return deleted

    @hookimpl(trylast=True)
    def percache_documents_added(self, ctx: AssistantContext, report: AddReport) -> None:
        scopes = {c.scope for c in report.new_chunks} | set(report.scopes)
        if not ctx.config.use_qa_bank or not scopes:
            return
        k = ctx.config.top_k
        bank = self.bank(ctx)
        current = bank.model()

        def retrieve_many(items: Sequence[Recheck]) -> list[list[str] | None]:
            out: list[list[str] | None] = [None] * len(items)  # None: a scope that did not change
            for scope in scopes:  # retrieval never crosses scopes: one batch per scope
                mine = [i for i, (_, s, _) in enumerate(items) if s == scope]
                # the questions' stored embeddings: a bank of questions is not embedded again
                queries = [_stored_query(ctx, items[i][0], items[i][2]) for i in mine]
                for i, chunks in zip(mine, ctx.hooks.retrieve_batch(ctx, queries, k, scope), strict=True):
                    out[i] = [c.id for c in chunks]
            return out

        def cannot_tell(model: str, scope: str | None) -> bool:
            # answered under other settings (top_k...): this handle's retrieval is not its own
            return scope in scopes and not same_settings(model, current)

        for entry_id in bank.mark_stale_for([c.id for c in report.new_chunks], cannot_tell=cannot_tell,
                                             retrieve_many=retrieve_many):
            entry = bank.get(entry_id)
            if entry is not None:
                ctx.idle_queue.push("refresh", entry.question, entry.scope)

    @hookimpl(trylast=True)
    def percache_close(self, ctx: AssistantContext) -> None:
        if self._bank is not None:
            self._bank.close()
