"""What a server job reports about its sources."""

from __future__ import annotations

from collections.abc import Generator

import percache_plugin as percache
from percache_plugin.server.jobs import _snippets
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
