"""Recall per chat turn: the threshold, the degenerate-distribution guard, and chat unchanged
when recall is off."""

from __future__ import annotations

import pytest

import percache_plugin as percache
from percache_plugin.memory.bank import FactHit
from percache_plugin.memory.recall import RecallGuard, memory_block, select
from percache_plugin.memory.rows import Fact
from tests.helpers import tiny_pair


def _hits(*sims: float) -> list[FactHit]:
    return [FactHit(Fact(f"m{i}", f"fact {i}", None), 1.0 / (i + 1), s) for i, s in enumerate(sims)]


def test_threshold_and_k() -> None:
    guard = RecallGuard(threshold=0.4)
    assert [h.fact.id for h in select(_hits(0.9, 0.5, 0.3), 5, guard)] == ["m0", "m1"]
    assert [h.fact.id for h in select(_hits(0.9, 0.5, 0.45), 2, guard)] == ["m0", "m1"]
    assert select([], 3, guard) == []


def test_a_flat_distribution_recalls_nothing_unless_its_best_is_strong() -> None:
    guard = RecallGuard(threshold=0.3, min_spread=0.05, strong=0.7)
    assert select(_hits(0.42, 0.41, 0.40, 0.40), 3, guard) == []
    assert len(select(_hits(0.75, 0.74, 0.73), 3, guard)) == 3
    # Two candidates are too few to call the distribution flat.
    assert len(select(_hits(0.42, 0.41), 3, guard)) == 2


def test_memory_block() -> None:
    assert memory_block([]) == ""
    assert memory_block(["a", "b"]) == "Relevant memories:\n- a\n- b\n\n"


@pytest.fixture(scope="module")
def pair():  # type: ignore[no-untyped-def]
    return tiny_pair("llama")


def test_chat_turn_recalls_facts_of_its_scope(pair) -> None:  # type: ignore[no-untyped-def]
    model, tok = pair
    pc = percache.enable(model, tok, embedder="hash", predict="off", memory_recall=True,
                         memory_threshold=0.3)
    tea = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact
    pc.memory.add("Ana drinks Quillberry tea every morning", scope="ben")
    pc.memory.add("Bob repairs old radios", scope="ana")
    reply = pc.chat("Which Quillberry tea does Ana drink every morning?", memory_scope="ana", max_new_tokens=2)
    assert reply.stats.fact_ids == [tea.id] and reply.stats.memory_tokens > 0
    assert "Quillberry" in tok.decode(reply.prompt_ids)
    # The turn keeps the user's message; the next turn reuses the whole history.
    assert pc.sessions.get("default").turns[-1].message == "Which Quillberry tea does Ana drink every morning?"
    nothing = pc.chat("Completely unrelated words here", memory_scope="nobody", max_new_tokens=2)
    assert nothing.stats.fact_ids == [] and nothing.stats.memory_tokens == 0
    assert nothing.stats.tokens_reused > 0
    pc.disable()


def test_memory_scope_chooses_the_recalled_facts_not_the_history(pair) -> None:  # type: ignore[no-untyped-def]
    """'text' mode: a turn's memory block is part of that turn, so a later turn of the same
    session with another ``memory_scope`` still has it in its history (docs/memory.md)."""
    model, tok = pair
    pc = percache.enable(model, tok, embedder="hash", predict="off", memory_recall=True,
                         memory_threshold=0.3)
    tea = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact
    first = pc.chat("Which Quillberry tea does Ana drink every morning?", memory_scope="ana", max_new_tokens=2)
    assert first.stats.fact_ids == [tea.id]
    other = pc.chat("Completely unrelated words here", memory_scope="bob", max_new_tokens=2)
    assert other.stats.fact_ids == [] and other.stats.tokens_reused > 0
    assert "Quillberry tea every morning" in tok.decode(other.prompt_ids)
    turn = pc.sessions.get("default").turns[0]
    assert turn.fact_ids == [tea.id] and turn.bare_ids is not None and turn.user_ids != turn.bare_ids
    pc.disable()


def test_recall_off_leaves_chat_exactly_as_without_memory(pair) -> None:  # type: ignore[no-untyped-def]
    model, tok = pair
    plain = percache.enable(model, tok, embedder="hash", predict="off")
    base = [plain.chat(m, max_new_tokens=3) for m in ("Hello there.", "Tell me about tea.")]
    plain.disable()
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    assert pc.config.memory_recall is False
    pc.memory.add("Ana drinks Quillberry tea every morning")
    pc.assistant._embedder = None  # recall must not embed anything when it is off
    got = [pc.chat(m, max_new_tokens=3) for m in ("Hello there.", "Tell me about tea.")]
    assert [r.prompt_ids for r in got] == [r.prompt_ids for r in base]
    assert [r.token_ids for r in got] == [r.token_ids for r in base]
    assert all(r.stats.fact_ids == [] for r in got)
    assert pc.assistant._embedder is None
    pc.disable()


def test_a_fact_retrieved_by_ask_is_a_chunk_whose_kv_is_stored_once(pair) -> None:  # type: ignore[no-untyped-def]
    model, tok = pair
    pc = percache.enable(model, tok, embedder="hash", predict="off", relevance_threshold=None,
                         memory_threshold=0.0, use_qa_bank=False)
    fact = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact
    first = pc.ask("Which Quillberry tea does Ana drink?", scope="ana", max_new_tokens=2)
    second = pc.ask("When does Ana drink Quillberry tea?", scope="ana", max_new_tokens=2)
    assert fact.id in first.sources and fact.id in second.sources
    assert [n.extra.get("chunk") for n in pc.store.nodes()].count(fact.id) == 1
    assert second.stats is not None and second.stats.nodes_reused >= 2  # system prompt + the fact
    pc.disable()
