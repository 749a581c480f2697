"""Where words stand: noun phrases trading places, and the attribute asked for."""

from __future__ import annotations

import pytest

from percache_plugin.rag.lexical import find_swap
from percache_plugin.rag.lexical_slots import asked_attribute, crossed
from percache_plugin.rag.meaning import question_shape
from percache_plugin.rag.wordnet import WordNet


@pytest.mark.parametrize(("a", "b"), [
    ("What did the team think of Marketing's proposal of Bluetooth?",
     "What did Marketing think of the team's proposal of Bluetooth?"),
    ("What does Evan's wife think of his family?", "What does Evan's family think of his wife?"),
    ("How did the audience in Tokyo react when Calvin sang one of his songs?",
     "How did Calvin react when the audience in Tokyo sang one of his songs?"),
])
def test_noun_phrases_trading_places_are_found(a: str, b: str) -> None:
    assert crossed(question_shape(a), question_shape(b)) is not None
    assert crossed(question_shape(b), question_shape(a)) is not None


@pytest.mark.parametrize(("a", "b"), [
    # a clause moved to the front, a passive, a date moved: no clean exchange
    ("During the finance discussion, why was Marketing unhappy about all the button changes?",
     "Why was Marketing unhappy about all the button changes during the finance discussion?"),
    ("What was discussed about the budget by the team?",
     "What did the team discuss about the budget?"),
    ("What food did Sam share a photo of on 19 August, 2023?",
     "On August 19, 2023, what food was in the photo Sam shared?"),
    ("What did the team think of the proposal?", "What did the team think of the proposal?"),
])
def test_reorderings_that_keep_the_meaning_are_not_crossed(a: str, b: str) -> None:
    assert crossed(question_shape(a), question_shape(b)) is None


def test_asked_attribute() -> None:
    car, color = "What kind of car does Evan drive?", "What color is the car Evan drives?"
    assert asked_attribute(question_shape(color), question_shape(car)) == "color"
    assert asked_attribute(question_shape(car), question_shape(color)) is None
    assert asked_attribute(question_shape("What colour is Evan's car?"),
                           question_shape("Which colour did Evan paint his car?")) is None
    assert asked_attribute(question_shape("Why is the car red?"), question_shape(car)) is None


@pytest.mark.parametrize(("stored", "asked", "kind"), [
    ("What did the team think of Marketing's proposal of Bluetooth?",
     "What did Marketing think of the team's proposal of Bluetooth?", "roles"),
    ("What kind of car does Evan drive?", "What color is the car Evan drives?", "attribute"),
    ("What's the advantage of technology innovation?", "What's the cost of technology "
     "innovation?", "attribute"),
])
def test_the_lexical_guard_refuses_them(wn: WordNet, stored: str, asked: str, kind: str) -> None:
    swap = find_swap(asked, stored, wn)
    assert swap is not None and swap.kind == kind


def test_an_attribute_named_by_a_wordnet_equivalent_passes(wn: WordNet) -> None:
    assert find_swap("What are Jolene's snakes called?", "What are the names of Jolene's snakes?",
                     wn) is None
