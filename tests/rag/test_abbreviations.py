"""Abbreviations the key-terms guard reads as their long form (a data table)."""

from __future__ import annotations

import pytest

from percache_plugin.rag.abbreviations import ABBREVIATIONS, with_long_forms
from percache_plugin.rag.guards import question_terms, terms_agree


def test_long_forms_are_added_both_ways() -> None:
    assert {"television"} <= with_long_forms({"tv", "watch"})
    assert "tv" in with_long_forms({"television", "watch"})
    assert "er" in with_long_forms({"emergency", "room"})
    assert "er" not in with_long_forms({"emergency"})  # every word of the long form


@pytest.mark.parametrize(("stored", "asked"), [
    ("When was Sam in the ER?", "When did Sam end up in the emergency room?"),
    ("What videos does Calvin watch on his television?", "What videos does Calvin watch on TV?"),
    ("When did Evan get back from a vacation with his SO?",
     "When did Evan return from his trip with his significant other?"),
    ("What is User Interface's presentation mainly about?",
     "What was the main point of the UI designer's presentation?"),
])
def test_key_terms_accept_a_listed_abbreviation(stored: str, asked: str) -> None:
    assert terms_agree(question_terms(asked), question_terms(stored))
    assert terms_agree(question_terms(stored), question_terms(asked))


def test_an_unlisted_abbreviation_or_another_name_is_still_refused() -> None:
    assert "pc" not in ABBREVIATIONS
    assert not terms_agree(question_terms("What did Sam buy for his PC?"),
                           question_terms("What did Sam buy for his personal computer?"))
    assert not terms_agree(question_terms("When was Sam in the ER?"),
                           question_terms("When was Sam in the ICU?"))


def test_table_is_lower_case_and_its_long_forms_are_words() -> None:
    for short, forms in ABBREVIATIONS.items():
        assert short == short.lower() and short.isalpha()
        assert all(f == f.lower() and f.replace(" ", "").isalpha() for f in forms)
