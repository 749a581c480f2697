"""Another handle or process removes (or replaces) a document between the retrieval of a
question and the moment ask() records which of the retrieved chunks resolve: the answer built
on the removed chunk must not stay in the store. The interleaving is driven by a wrapper on
``percache_retrieve``, not by timing; the second handle stands for another process."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from percache_plugin.hooks.specs import hookimpl
from tests.assistant.test_assistant import BEN, GEN, _pc
from tests.assistant.test_removal_traces import REMOVALS, SECRET, Q


class AfterRetrieval:
    """Runs ``action`` once, right after the first retrieval returns."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action: Callable[[], object] | None = action

    @hookimpl(wrapper=True)
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: Any) -> Generator[None, Any, Any]:
        chunks = yield
        action, self.action = self.action, None
        if action is not None:
            action()
        return chunks


@pytest.mark.parametrize("change", sorted(REMOVALS))
def test_an_answer_on_a_chunk_removed_right_after_its_retrieval_is_not_kept(tmp_path: Path, change: str) -> None:
    store = tmp_path / "s"
    a, b = _pc(store), _pc(store)
    a.add_documents([SECRET, BEN], scope="me")
    secret = {c.id for c in a.knowledge.chunks() if c.doc_id == "zz" and c.text == SECRET["text"]}
    a.plugins.register(AfterRetrieval(lambda: REMOVALS[change](b)))
    answer = a.ask(Q, scope="me", **GEN)
    assert secret & set(answer.sources)  # the premise: generated from the chunk b removed
    for pc in (a, b):
        kept = [e for e in pc.qa_bank.entries() if secret & set(e.sources)]
        assert not kept, f"answers built on the removed chunk kept: {kept}"
    nodes = [n.key for n in b.engine.store.nodes() if n.extra.get("chunk") in secret]
    assert not nodes, "the removed chunk's K/V is kept"
    a.close()
    b.close()
