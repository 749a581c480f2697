"""A scope's asks reuse only the K/V its own requests and idle work stored: a document another
scope added with the same text is computed again, so no reuse count (``tokens_reused``,
``tokens_shifted``, the server's ``cached_tokens``) tells one scope what another holds; within a
scope nothing is lost (its second ask, its warmed and populated chunks are reused)."""

from __future__ import annotations

from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.assistant.ask import segments_for
from tests.helpers import tiny_pair

DOC = "Ana: the choir rehearsal moved to Friday at 6 pm in the small hall."
OTHER = "Ben: the budget review is on Monday; travel costs are over plan."
QUESTION = "When is the choir rehearsal?"
GEN = {"max_new_tokens": 2}


def _pc(**config: Any) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    # no QA bank: every ask generates (what it reuses is what is measured); no idle work unless asked
    config = {"embedder": "hash", "predict": "off", "answer_grounding": False, "use_qa_bank": False,
              "kv_warm": False, "draft_calibrate_idle": False, **config}
    return percache.enable(model, tok, **config)


def _reuse(answer: Any) -> tuple[int, int, int]:
    st = answer.stats
    assert answer.source == "generated" and st is not None
    return st.tokens_reused, st.tokens_shifted, st.tokens_computed


def _reusable(pc: percache.PerCache, question: str, answer: Any, scope: str) -> int:
    """The tokens of the ask's cacheable pieces (system prompt and chunks)."""
    chunks = [pc.knowledge.chunk(c) for c in answer.sources]
    prompt = pc.engine.prompt(segments_for(pc.config.system_prompt, question, chunks), scope)
    return sum(p.n_tokens for p in prompt.reusable)


# exact: a's prompt is b's prompt; shifted: a's holds the chunk at another position (after OTHER's)
@pytest.mark.parametrize(("reuse", "a_docs"), [("exact", [DOC]), ("shifted", [DOC, OTHER])])
def test_another_scopes_identical_document_is_not_reused(reuse: str, a_docs: list[str]) -> None:
    fresh, shared = _pc(reuse=reuse), _pc(reuse=reuse)
    try:
        fresh.add_documents([DOC], scope="b")
        alone = fresh.ask(QUESTION, scope="b", **GEN)
        shared.add_documents(a_docs, scope="a")
        shared.ask(QUESTION, scope="a", **GEN)  # stores a's system prompt and chunks
        shared.add_documents([DOC], scope="b")
        after_a = shared.ask(QUESTION, scope="b", **GEN)
        assert after_a.sources and alone.sources
        assert _reuse(after_a) == _reuse(alone) == (0, 0, alone.stats.prompt_tokens)  # type: ignore[union-attr]
        assert shared.stats().tokens_reused == 0 and shared.stats().tokens_shifted == 0
    finally:
        fresh.close()
        shared.close()


@pytest.mark.parametrize("reuse", ["exact", "shifted"])
def test_a_scopes_own_second_ask_is_reused(reuse: str) -> None:
    pc = _pc(reuse=reuse)
    try:
        pc.add_documents([DOC], scope="a")
        pc.add_documents([DOC], scope="b")
        first = pc.ask(QUESTION, scope="a", **GEN)
        pc.ask(QUESTION, scope="b", **GEN)  # b's keys beside a's take nothing from a
        again = pc.ask(QUESTION, scope="a", **GEN)
        reused, shifted, computed = _reuse(again)
        assert reused == _reusable(pc, QUESTION, again, "a") > 0 and shifted == 0
        assert computed == first.stats.prompt_tokens - reused  # type: ignore[union-attr]
    finally:
        pc.close()


def test_chunks_warmed_for_a_scope_serve_its_asks_only() -> None:
    pc = _pc(kv_warm=True)
    try:
        pc.add_documents([DOC], scope="a")
        assert pc.idle().by_kind == {"warm": 1}
        pc.add_documents([DOC], scope="b")  # its warm task not run: b holds nothing computed
        b = pc.ask(QUESTION, scope="b", **GEN)
        assert _reuse(b)[:2] == (0, 0)
        a = pc.ask(QUESTION, scope="a", **GEN)
        assert _reuse(a)[0] == _reusable(pc, QUESTION, a, "a") > 0  # [system, chunk] as warmed
    finally:
        pc.close()


def test_chunks_populated_for_a_scope_serve_its_asks() -> None:
    # prefill-only population (tau above the cutoff): the predicted question's prompt is stored
    pc = _pc(use_qa_bank=True, similarity_threshold=0.95, population_cutoff=0.9)
    try:
        pc.add_documents([DOC, OTHER], scope="a")
        pc.idle_queue.push("populate", QUESTION, "a")
        assert pc.idle().by_kind == {"populate": 1}
        a = pc.ask(QUESTION, scope="a", **GEN)  # the entry has no answer: generated, reusing it all
        assert _reuse(a)[0] == _reusable(pc, QUESTION, a, "a") > 0
    finally:
        pc.close()
