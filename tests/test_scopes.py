"""Scopes never mix (defect 7): ``scope=None`` reads unscoped documents only, and nothing in an
answer tells one scope what another holds."""

from __future__ import annotations

import percache_plugin as percache
from tests.helpers import tiny_pair

DOCS = ["Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.",
        "Ben: the budget review is on Monday; travel costs are over plan."]
GEN = {"max_new_tokens": 3}


def test_unscoped_questions_never_see_scoped_documents() -> None:
    pc = percache.enable(*tiny_pair("llama"), embedder="hash", predict="off")
    try:
        pc.add_documents(DOCS, scope="alice")
        bare = pc.ask("When is the choir rehearsal?", **GEN)
        assert bare.sources == ()  # alice's chunks never reach an unscoped prompt
        pc.add_documents(["Shared: the choir rehearsal room is the small hall."])
        shared = pc.ask("When is the choir rehearsal?", **GEN)
        assert shared.sources and all(pc.knowledge.chunk(c).scope is None for c in shared.sources)
        alice = pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
        assert alice.sources and all(pc.knowledge.chunk(c).scope == "alice" for c in alice.sources)
        bob = pc.ask("When is the choir rehearsal?", scope="bob", **GEN)
        assert bob.rejected_by != "scope" and bob.sources == ()
    finally:
        pc.close()
