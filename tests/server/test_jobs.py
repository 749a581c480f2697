"""What a server job reports about its sources."""

from __future__ import annotations

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
