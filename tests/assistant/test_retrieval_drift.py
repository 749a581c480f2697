"""A stored answer is served only while its question retrieves what it was generated from:
adding or removing a document changes BM25's word weights, so a question's top-k can change
though none of the document's own chunks enters it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import percache_plugin as percache
from tests.assistant.test_assistant import _pc

# Found by search with the hash embedder: adding EXTRA (or removing it) swaps one of the
# question's three chunks for another old chunk; EXTRA's own chunk is not among them.
DOCS = [
    {"text": "code slides locker choir rehearsal locker rehearsal budget.", "id": "d0"},
    {"text": "choir monday friday projector room slides locker monday.", "id": "d1"},
    {"text": "travel locker rehearsal ana plan projector ben code.", "id": "d2"},
    {"text": "slides rehearsal hall projector projector hall room budget.", "id": "d3"},
    {"text": "budget projector monday room ben budget room projector.", "id": "d4"},
]
EXTRA = {"text": "projector locker slides projector locker monday locker plan locker hall travel friday.",
         "id": "x"}
Q = "friday code budget?"
GEN = {"max_new_tokens": 6}


def _retrieved(pc: percache.PerCache) -> set[str]:
    return {c.id for c in pc.knowledge.retrieve(Q, 3, scope="me")}


CHANGES: dict[str, tuple[list[dict[str, str]], Callable[[percache.PerCache], object]]] = {
    "add": (DOCS, lambda pc: pc.add_documents([EXTRA], scope="me")),
    "remove_document": (DOCS + [EXTRA], lambda pc: pc.knowledge.remove_document("x", "me")),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_answer_whose_question_retrieves_other_chunks_since_is_not_served(tmp_path: Path,
                                                                           change: str) -> None:
    docs, act = CHANGES[change]
    pc = _pc(tmp_path / "s")
    pc.add_documents(docs, scope="me")
    before = _retrieved(pc)
    first = pc.ask(Q, scope="me", **GEN)
    assert first.source == "generated" and set(first.sources) == before
    act(pc)
    after = _retrieved(pc)
    extra = {c.id for c in pc.knowledge.chunks() if c.doc_id == "x"}
    assert after != before and not after & extra  # the premise: the question's top-k moved
    again = pc.ask(Q, scope="me", **GEN)
    assert again.source == "generated" and set(again.sources) == after
    pc.idle()  # the refresh stores the answer a fresh store gives
    served = pc.ask(Q, scope="me", **GEN)
    pc.close()
    fresh = _pc(tmp_path / "fresh")
    fresh.add_documents(DOCS if change == "remove_document" else DOCS + [EXTRA], scope="me")
    expected = fresh.ask(Q, scope="me", **GEN)
    fresh.close()
    assert served.source == "qa_bank" and (served.text, set(served.sources)) == (
        expected.text, set(expected.sources))


def test_an_answer_is_not_served_after_the_cli_removed_a_document_of_its_scope(tmp_path: Path) -> None:
    from percache_plugin.cli import main

    store = tmp_path / "s"
    pc = _pc(store)
    pc.add_documents(DOCS + [EXTRA], scope="me")
    pc.add_documents([{"text": "ana travel plan friday code.", "id": "o"}], scope="other")
    before = _retrieved(pc)
    assert pc.ask(Q, scope="me", **GEN).source == "generated"
    other = pc.ask("ana travel plan?", scope="other", **GEN)
    assert other.source == "generated"
    pc.close()
    assert main(["store", "remove", str(store), "--doc", "x"]) == 0
    pc = _pc(store)
    try:
        after = _retrieved(pc)
        assert after != before  # the premise: the question's top-k moved, x's chunk not in it
        again = pc.ask(Q, scope="me", **GEN)
        assert again.source == "generated" and set(again.sources) == after
        assert pc.ask("ana travel plan?", scope="other", **GEN).source == "qa_bank"  # another scope
    finally:
        pc.close()
