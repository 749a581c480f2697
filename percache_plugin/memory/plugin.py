"""The built-in memory plugin: owns the :class:`~percache_plugin.memory.bank.MemoryBank` (in the
store's SQLite file), puts facts beside document chunks in ``ask()`` and registers the
``memory_extract`` idle task kind (:mod:`.idle`).

``percache_retrieve`` is wrapped: the chunks the retrieval plugins found come first, then the
facts of the question's scope that pass the recall guard (``Config.memory_in_ask``,
``memory_k``, ``memory_threshold``). A stored answer's sources then name the facts it was built
on, so forgetting a fact, or a newer fact superseding it, drops the answer
(``percache_sources_forgotten``); a fact added or updated marks stale the answers of the
questions that now retrieve it (``percache_documents_added`` with the facts as chunks).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

from ..hooks.specs import hookimpl
from ..kv.store import DB_NAME
from ..rag.knowledge import AddReport
from .bank import AddResult, MemoryBank, fact_chunk
from .forget import drop_kv
from .idle import EXTRACT_KIND, ExtractionStats, extraction_runner
from .recall import RecallGuard, select

if TYPE_CHECKING:
    from ..core.query import Query
    from ..hooks.contexts import AssistantContext
    from ..rag.chunking import Chunk
    from .bank import FactHit

__all__ = ["MEMORY_PLUGIN", "MemoryPlugin"]

MEMORY_PLUGIN = "percache_plugin.memory.plugin:MemoryPlugin"


class MemoryPlugin:
    """Facts (L2) of the store, retrievable by ``ask()``."""

    def __init__(self) -> None:
        self._bank: MemoryBank | None = None
        self.extraction = ExtractionStats()

    def bank(self, ctx: AssistantContext) -> MemoryBank:
        """The memory bank (opened on first use, in the K/V store's SQLite file)."""
        if self._bank is None:
            root = ctx.engine.store.path
            self._bank = MemoryBank(None if root is None else root / DB_NAME, ctx.embedder)
            self._bank.committed.append(lambda results: self._committed(ctx, results))
        return self._bank

    @staticmethod
    def _committed(ctx: AssistantContext, results: Sequence[AddResult]) -> None:
        """Facts were added, updated or superseded: no answer built on a superseded fact is
        served again (as for a forgotten one), and the answers of questions that now retrieve
        a new or updated fact are stale (refreshed in idle time), as for new document chunks."""
        gone = [fact_id for r in results for fact_id in r.superseded]
        if gone:
            ctx.hooks.sources_forgotten(ctx, gone)
        new = tuple(fact_chunk(r.fact) for r in results if r.status in ("added", "updated"))
        if new:
            ctx.hooks.documents_added(ctx, AddReport(0, new, 0))

    def recall(self, ctx: AssistantContext, query: Query, scope: str | None) -> list[FactHit]:
        """The facts of ``scope`` to recall for ``query`` (threshold and degenerate guard)."""
        bank = self.bank(ctx)
        k = ctx.config.memory_k
        hits = bank.search(query.text, scope, max(3 * k, 5), embedding=query.embedding)
        return select(hits, k, RecallGuard(threshold=ctx.config.memory_threshold))

    @hookimpl(wrapper=True)
    def percache_retrieve(self, ctx: AssistantContext, query: Query, k: int,
                          scope: str | None) -> Generator[None, list[Chunk] | None, list[Chunk] | None]:
        chunks = yield
        return self._with_facts(ctx, query, scope, chunks)

    @hookimpl(wrapper=True)
    def percache_retrieve_batch(self, ctx: AssistantContext, queries: Sequence[Query], k: int, scope: str | None
                                ) -> Generator[None, list[list[Chunk]] | None, list[list[Chunk]] | None]:
        found = yield  # None: each query goes through percache_retrieve, wrapped above
        if found is None:
            return None
        return [self._with_facts(ctx, q, scope, chunks) or [] for q, chunks in zip(queries, found, strict=True)]

    def _with_facts(self, ctx: AssistantContext, query: Query, scope: str | None,
                    chunks: list[Chunk] | None) -> list[Chunk] | None:
        """The chunks found, then the facts ``query`` recalls (``Config.memory_in_ask``)."""
        if not ctx.config.memory_in_ask or len(self.bank(ctx)) == 0:
            return chunks
        facts = [fact_chunk(h.fact) for h in self.recall(ctx, query, scope)]
        return [*(chunks or []), *facts] if facts else chunks

    @hookimpl
    def percache_resolve_chunks(self, ctx: AssistantContext, ids: Sequence[str]) -> list[Chunk] | None:
        if self._bank is None or not ids:
            return None
        facts = []
        for fact_id in ids:
            fact = self._bank.find(fact_id)
            if fact is None or fact.status != "active":
                return None
            facts.append(fact_chunk(fact))
        return facts

    @hookimpl
    def percache_sources_forgotten(self, ctx: AssistantContext, ids: Sequence[str]) -> int | None:
        """A request that retrieved a fact forgotten while it ran stored the fact's K/V after
        ``forget`` deleted it: delete it too (counts no answers)."""
        if self._bank is not None:
            for fact_id in ids:
                if self._bank.tombstoned(fact_id):
                    drop_kv([ctx.engine.store], fact_id, set(), None, None)
        return None

    @hookimpl
    def percache_register_idle_tasks(self, register: Callable[[str, Any], None]) -> None:
        register(EXTRACT_KIND, extraction_runner(lambda c: self.bank(c.ctx), self.extraction))

    @hookimpl(trylast=True)
    def percache_close(self, ctx: AssistantContext) -> None:
        if self._bank is not None:
            self._bank.close()
