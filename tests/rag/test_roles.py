"""The roles guard: two names trading their grammatical slots, a "who" turning round."""

from __future__ import annotations

import pytest

from percache_plugin.rag.embeddings import Embedder
from percache_plugin.rag.guards import DEFAULT_MEANING_GUARDS, DEFAULT_TAU
from percache_plugin.rag.meaning import meaning_checks, question_shape
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.roles import WHO_OBJECT, WHO_SUBJECT, question_roles, roles_swapped

WITHOUT = tuple(sorted(DEFAULT_MEANING_GUARDS - {"roles"}))


def swapped(a: str, b: str) -> bool:
    return roles_swapped(question_roles(a), question_roles(b))


def test_slots_are_read_from_the_word_before_each_name() -> None:
    assert question_roles("What painting did Evan share with Sam in October?") == {
        "evan": "subj", "sam": "prep:with"}
    assert question_roles("When did Dave see Aerosmith perform live?") == {
        "dave": "subj", "aerosmith": "obj"}
    assert question_roles("According to Evan, what is important for Sam's weight?") == {
        "evan": "prep:to", "sam": "poss"}
    # a later "have" is a verb, an article is skipped, "and" joins, a title is no name
    assert question_roles("Why did the Marketing think they should have LCD?") == {
        "marketing": "subj", "lcd": "obj"}
    assert question_roles("How did Calvin and Frank Ocean meet in May?") == {
        "calvin": "subj", "frank ocean": "subj"}
    assert question_roles("What problems does Andrew face that Toby caused?")["toby"] == "subj"


def test_who_as_subject_or_object() -> None:
    assert question_roles("Who invited Calvin to Boston?")[WHO_SUBJECT] == WHO_SUBJECT
    assert question_roles("Who did Calvin invite to Boston?")[WHO_OBJECT] == WHO_OBJECT
    assert swapped("Who invited Calvin to Boston?", "Who did Calvin invite to Boston?")
    assert not swapped("Who invited Calvin to Boston?", "Who asked Calvin to come to Boston?")


@pytest.mark.parametrize(("stored", "asked"), [
    ("What painting did Evan share with Sam in October?",
     "What painting did Sam share with Evan in October?"),
    ("When did Dave see Aerosmith perform live?", "When did Aerosmith see Dave perform live?"),
    ("According to Evan, what is important for Sam to believe in?",
     "According to Sam, what is important for Evan to believe in?"),
    ("How did Sam suggest Evan view the setback?", "How did Evan suggest Sam view the setback?"),
    # the subject changes, with another verb and preposition
    ("What recipe did Evan request from Sam?", "What recipe did Sam share with Evan?"),
])
def test_names_trading_slots_are_refused(stored: str, asked: str) -> None:
    assert swapped(stored, asked) and swapped(asked, stored)
    checks = meaning_checks(question_shape(asked), question_shape(stored))
    assert checks["roles"] is False
    assert all(ok for g, ok in checks.items() if g != "roles")  # no other guard sees it


@pytest.mark.parametrize(("stored", "asked"), [
    ("What painting did Evan share with Sam?", "What painting was shared by Evan with Sam?"),
    ("How did Calvin meet Frank Ocean?", "How did Calvin and Frank Ocean first meet?"),
    ("What do Evan and Sam plan to do together?", "What do Sam and Evan plan to do together?"),
    ("What did Evan tell Sam on 9 December?", "What news did Evan share with Sam on 9 December?"),
    ("When did Dave see Aerosmith?", "When did Dave watch Aerosmith perform?"),
])
def test_rewordings_keeping_who_does_what_pass(stored: str, asked: str) -> None:
    assert not swapped(stored, asked)
    assert meaning_checks(question_shape(asked), question_shape(stored))["roles"] is True


def test_roles_is_on_by_default() -> None:
    assert "roles" in DEFAULT_MEANING_GUARDS


def test_qa_bank_refuses_swapped_roles_only_with_the_guard_on(minilm: Embedder) -> None:
    bank = QABank(None, minilm, byte_limit=None)
    bank.add("What painting did Evan share with Sam in October?", "A cactus in the desert.")
    probe = "What painting did Sam share with Evan in October?"
    on = bank.lookup(probe, tau=DEFAULT_TAU)
    assert on.match is None and on.rejected_by == "roles"
    off = bank.lookup(probe, tau=DEFAULT_TAU, meaning=WITHOUT)
    assert off.match is not None  # switched off, it is served (and counted as such)
    assert bank.stats()["served_with_guard_off"]["roles"] == 1  # type: ignore[index]
    served = bank.lookup("What painting was shared by Evan with Sam in October?", tau=DEFAULT_TAU)
    assert served.match is not None and served.match.entry.answer == "A cactus in the desert."
