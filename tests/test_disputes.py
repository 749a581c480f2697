"""Answers that can be trusted or are labelled: nothing relevant, corrections, contradictions."""

from __future__ import annotations

import percache_plugin as percache
from percache_plugin.assistant.disputes import contradicts, dispute_paraphrases, key_facts
from tests.helpers import tiny_pair

DOCS = [
    "Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.",
    "Ben: the budget review is on Monday; travel costs are over plan.",
]
GEN = {"max_new_tokens": 4}


def _pc(**config: object) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    config.setdefault("predict", "off")
    config.setdefault("background_max_new_tokens", 4)
    return percache.enable(model, tok, embedder="hash", **config)


def test_empty_scope_says_no_relevant_documents() -> None:
    pc = _pc()
    pc.add_documents(DOCS, scope="alice")
    before = pc.stats().requests
    a = pc.ask("When are the Olympic Games?", scope="nobody", **GEN)
    assert a.source == "no_documents" and a.sources == () and a.stats is None
    assert "no relevant documents" in a.text
    assert pc.stats().requests == before  # no inference
    assert pc.qa_bank.entries(scope="nobody") == []  # nothing stored


def test_nothing_relevant_enough_is_refused_and_can_be_switched_off() -> None:
    pc = _pc(relevance_threshold=0.99)
    pc.add_documents(DOCS, scope="alice")
    a = pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
    assert a.source == "no_documents" and a.relevance is not None and a.relevance < 0.99
    pc.configure(relevance_threshold=None)
    b = pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
    assert b.source == "generated" and b.relevance is not None


def test_contradiction_is_about_facts() -> None:
    assert key_facts("It is on Friday at 6 pm with Ana.") >= {"friday", "6", "ana"}
    assert contradicts("Friday at 6 pm.", "Thursday at 9 am.")
    assert not contradicts("Friday at 6 pm.", "On Friday, 6 pm, in the hall.")
    assert not contradicts("yes", "It moved.")  # no facts to compare


def test_user_correction_stops_paraphrases_being_served() -> None:
    pc = _pc(similarity_threshold=0.5)
    pc.add_documents(DOCS, scope="alice")
    pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
    pc.qa_bank.add("When is the choir rehearsal ?", "Thursday at 9 am", scope="alice",
                   sources=pc.qa_bank.entries()[0].sources, origin="predicted")
    first = pc.qa_bank.entries(scope="alice")[0]
    pc.correct(first.id, "Friday at 6 pm")
    entries = {e.question: e for e in pc.qa_bank.entries(scope="alice")}
    assert entries["When is the choir rehearsal?"].answer == "Friday at 6 pm"
    assert not entries["When is the choir rehearsal?"].stale
    assert entries["When is the choir rehearsal ?"].stale  # the paraphrase with the old answer
    a = pc.ask("when is the choir rehearsal", scope="alice", **GEN)
    assert a.source == "qa_bank" and a.text == "Friday at 6 pm"


def test_disputed_answer_is_not_served_until_resolved() -> None:
    pc = _pc(similarity_threshold=0.5)
    pc.add_documents(DOCS, scope="alice")
    sources = tuple(c.id for c in pc.knowledge.chunks())
    entry = pc.qa_bank.add("When is the choir rehearsal?", "Sunday at 11 am with Zed", scope="alice",
                           sources=sources, origin="predicted")
    assert pc.ask("When is the choir rehearsal ?", scope="alice", **GEN).source == "qa_bank"
    assert dispute_paraphrases(pc.assistant, entry, include_self=True) == [entry.id]
    assert pc.ask("When is the choir rehearsal", scope="alice", **GEN).source == "generated"
    pc.correct(entry.id, "Friday at 6 pm")  # resolved by the user
    a = pc.ask("When is the choir rehearsal", scope="alice", **GEN)
    assert a.source == "qa_bank" and a.text == "Friday at 6 pm"
