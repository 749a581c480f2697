"""Built-in plugins of the ask() pipeline: retrieval from the knowledge bank and the QA bank."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..hooks.specs import hookimpl

if TYPE_CHECKING:
    from ..engine import PerCache
    from ..rag.chunking import Chunk
    from ..rag.knowledge import AddReport
    from ..rag.qa_bank import LookupResult

__all__ = ["KnowledgeRetrieval", "QABankPlugin"]


class KnowledgeRetrieval:
    """Hybrid BM25 + embedding search over the handle's knowledge bank."""

    @hookimpl(trylast=True)
    def percache_retrieve(self, pc: PerCache, query: str, k: int, scope: str | None) -> list[Chunk]:
        return pc.knowledge.retrieve(query, k, scope=scope, query_embedding=pc.query_embedding(query))


class QABankPlugin:
    """Serve, store and refresh answers through the handle's QA bank."""

    @hookimpl(trylast=True)
    def percache_qa_lookup(self, pc: PerCache, query: str, scope: str | None,
                           retrieved: Sequence[str]) -> LookupResult | None:
        if not pc.config.use_qa_bank:
            return None
        overlap = pc.config.consistency_min_overlap
        return pc.qa_bank.lookup(
            query, tau=pc.config.similarity_threshold, scope=scope,
            retrieved=None if overlap is None else list(retrieved),
            min_overlap=overlap if overlap is not None else 0.0,
            embedding=pc.query_embedding(query),
        )

    @hookimpl(trylast=True)
    def percache_qa_store(self, pc: PerCache, query: str, answer: str | None, scope: str | None,
                          sources: Sequence[str], origin: str) -> None:
        if pc.config.use_qa_bank:
            pc.qa_bank.add(query, answer, scope=scope, sources=list(sources), origin=origin,
                           embedding=pc.query_embedding(query))  # type: ignore[arg-type]

    @hookimpl(trylast=True)
    def percache_documents_added(self, pc: PerCache, report: AddReport) -> None:
        if not pc.config.use_qa_bank or not report.new_chunks:
            return
        k = pc.config.top_k

        def retrieve(question: str, scope: str | None) -> list[str]:
            return [c.id for c in pc.hooks.retrieve(pc, question, k, scope)]

        stale = pc.qa_bank.mark_stale_for([c.id for c in report.new_chunks], retrieve)
        for entry_id in stale:
            entry = pc.qa_bank.get(entry_id)
            if entry is not None:
                pc.idle_queue.push("refresh", entry.question, entry.scope)
