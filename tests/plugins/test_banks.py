"""Built-in bank plugins own their banks; a third-party retrieval replaces the knowledge bank."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.rag.chunking import Chunk
from tests.helpers import tiny_pair

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
