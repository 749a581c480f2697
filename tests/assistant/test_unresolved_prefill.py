"""Idle prefill over a retriever's own chunks, which no plugin resolves by id: they are still
retrieved, so they are not taken for removed (the answer entry and the K/V the prefill stored
for them stay), as ask() keeps them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import percache_plugin as percache
from percache_plugin.rag.chunking import Chunk
from tests.assistant.test_assistant import _pc

QUESTION = "When does the tram pass renew?"


class OwnChunks:
    """A retriever whose chunks the knowledge bank never saw, with no ``percache_resolve_chunks``."""

    chunks = [Chunk(id="ext-1", doc_id="external", index=1, text="Dana: the tram pass renews on the 3rd.", scope=None)]

    @percache.hookimpl
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: Any) -> list[Chunk]:
        return self.chunks[:k]


def test_populating_over_a_retrievers_own_chunks_keeps_its_entry_and_kv(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "s")
    pc.configure(similarity_threshold=0.95, population_cutoff=0.9)  # populate prefills only
    pc.plugins.register(OwnChunks())
    pc.idle_queue.push("populate", QUESTION, None)
    assert pc.idle().by_kind == {"populate": 1}
    assert [(e.question, e.sources) for e in pc.qa_bank.entries()] == [(QUESTION, ("ext-1",))]
    assert [n for n in pc.store.nodes() if n.extra.get("chunk") == "ext-1"]
    pc.close()
