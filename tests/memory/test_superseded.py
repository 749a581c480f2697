"""A fact superseded by a newer one (``pc.memory.add`` with the same subject) reaches no prompt
and no served answer any more: the chat turns that recalled it as text lose it (also in a
session saved before and loaded by another handle), and the answers built on it are dropped.
A new fact that a question now retrieves makes the question's stored answer stale."""

from __future__ import annotations

from pathlib import Path

import percache_plugin as percache
from tests.assistant.test_assistant import BEN, GEN, OLD, Q, _pc
from tests.helpers import baseline, tiny_pair
from tests.memory.test_forget_text import CONFIG, TEA, TURNS

SUBJECT = {"subject": "what Ana drinks"}
COFFEE = "Ana drinks Quillberry coffee every evening"


def _next_turn_has_only_the_new_fact(pc: percache.PerCache, tok: object) -> None:
    reply = pc.chat(TURNS[2][0], session="s", memory_scope="ana", max_new_tokens=3)
    text = tok.decode(reply.prompt_ids)  # type: ignore[attr-defined]
    assert "every morning" not in text and "every evening" in text
    with pc.disabled():
        want, logits = baseline(pc.model, reply.prompt_ids, 3)
    assert reply.token_ids == want
    assert (reply.first_logits - logits).abs().max().item() <= 1e-4


def test_a_superseded_fact_leaves_the_turns_that_recalled_it() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, **CONFIG)
    old = pc.memory.add(TEA, scope="ana", metadata=SUBJECT).fact
    pc.sessions.create("s", system="Be brief.")
    first = pc.chat(TURNS[0][0], session="s", memory_scope="ana", max_new_tokens=3)
    assert "every morning" in tok.decode(first.prompt_ids)
    assert pc.memory.add(COFFEE, scope="ana", metadata=SUBJECT).superseded == (old.id,)
    _next_turn_has_only_the_new_fact(pc, tok)
    pc.close()


def test_a_saved_session_loaded_after_the_fact_was_superseded_elsewhere(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    config = {**CONFIG, "store": tmp_path / "s"}
    pc = percache.enable(model, tok, **config)
    pc.memory.add(TEA, scope="ana", metadata=SUBJECT)
    pc.sessions.create("s", system="Be brief.")
    pc.chat(TURNS[0][0], session="s", memory_scope="ana", max_new_tokens=3)
    other = percache.enable(*tiny_pair("llama"), **config)  # another handle on the store
    other.memory.add(COFFEE, scope="ana", metadata=SUBJECT)
    other.close()
    _next_turn_has_only_the_new_fact(pc, tok)  # the live copy
    pc.close()
    reopened = percache.enable(model, tok, **config)
    _next_turn_has_only_the_new_fact(reopened, tok)  # and the saved one
    reopened.close()


def test_an_answer_built_on_a_superseded_fact_is_not_served(tmp_path: Path) -> None:
    def handle(store: Path) -> percache.PerCache:
        model, tok = tiny_pair("llama")
        return percache.enable(model, tok, store=store, embedder="hash", predict="off",
                               answer_grounding=False, kv_warm=False, memory_threshold=0.0)

    # a document beside the fact: the consistency guard (half the sources retrieved again) passes
    question = "What does Ana drink?"
    doc = {"text": "Ben: the budget review is on Monday.", "id": "ben"}
    pc = handle(tmp_path / "old")
    pc.add_documents([doc], scope="ana")
    pc.memory.add(TEA, scope="ana", metadata=SUBJECT)
    first = pc.ask(question, scope="ana", max_new_tokens=4)
    assert first.source == "generated" and any(s.startswith("m") for s in first.sources)
    new = pc.memory.add(COFFEE, scope="ana", metadata=SUBJECT).fact
    after = pc.ask(question, scope="ana", max_new_tokens=4)
    pc.close()
    fresh = handle(tmp_path / "fresh")
    fresh.add_documents([doc], scope="ana")
    fresh_fact = fresh.memory.add(COFFEE, scope="ana", metadata=SUBJECT).fact
    expected = fresh.ask(question, scope="ana", max_new_tokens=4)
    fresh.close()
    assert after.source == expected.source == "generated"
    assert after.sources[-1] == new.id and expected.sources[-1] == fresh_fact.id
    assert after.sources[:-1] == expected.sources[:-1] == first.sources[:-1]
    assert after.text == expected.text


def test_an_answer_is_not_served_once_a_new_fact_joins_its_questions_prompt(tmp_path: Path) -> None:
    # ask() puts recalled facts beside the chunks: a fresh store given the fact answers from it
    moved = "The choir rehearsal moved to Monday at noon."
    pc = _pc(tmp_path / "old")
    pc.configure(memory_threshold=0.0)
    pc.add_documents([OLD, BEN], scope="alice")
    assert pc.ask(Q, scope="alice", **GEN).source == "generated"
    pc.memory.add(moved, scope="alice")
    after = pc.ask(Q, scope="alice", **GEN)
    pc.close()
    fresh = _pc(tmp_path / "fresh")
    fresh.configure(memory_threshold=0.0)
    fresh.add_documents([OLD, BEN], scope="alice")
    fresh.memory.add(moved, scope="alice")
    expected = fresh.ask(Q, scope="alice", **GEN)
    fresh.close()
    assert after.source == expected.source == "generated" and after.text == expected.text
    assert len(after.sources) == len(expected.sources) == 3  # the two chunks and the fact
