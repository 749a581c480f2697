"""The grounding check of a generated answer against its source chunks (the demo's notes)."""

from __future__ import annotations

import pytest

from percache_plugin.demo import SAMPLE_CHUNKS
from percache_plugin.rag.grounding import check_grounding, superseded_values

# Answers SmolLM2 gave in the demo, and correct ones.
WRONG_DAY = "The choir rehearsal is scheduled for Thursday at 6 pm, in the small hall of the community centre."
GOOD = [
    "The choir rehearsal is on Friday at 6 pm, in the small hall of the community centre.",
    "Carl borrowed the projector; he will return it on Saturday morning.",
    "Ben will send revised numbers by Wednesday noon; travel costs are 12% over plan.",
    "The next review is on the 14th.",
    "Bring the new sheet music.",  # no key facts: nothing to check
]


def test_the_demo_answer_that_contradicts_its_note_is_flagged() -> None:
    g = check_grounding(WRONG_DAY, SAMPLE_CHUNKS)
    assert g.flagged and g.superseded == (("thursday", "friday"),) and not g.unsupported
    assert g.reasons() == ("'thursday' (the sources changed it to 'friday')",)


@pytest.mark.parametrize("answer", GOOD)
def test_answers_the_notes_support_are_not_flagged(answer: str) -> None:
    g = check_grounding(answer, SAMPLE_CHUNKS)
    assert not g.flagged, g.reasons()


def test_unsupported_numbers_and_days() -> None:
    g = check_grounding("Travel costs are 15% over plan; the review is on Sunday.", SAMPLE_CHUNKS)
    assert set(g.unsupported) == {"15%", "sunday"}
    assert check_grounding("The rehearsal is on Wednesdays.", SAMPLE_CHUNKS[1:2]).unsupported == ()


def test_spoken_numbers_and_the_modal_may() -> None:
    src = ["Speaker A: we recorded about thirty two hours, maybe forty."]
    assert not check_grounding("About 32 hours were recorded.", src).flagged
    assert check_grounding("About 33 hours were recorded.", src).unsupported == ("33",)
    assert not check_grounding("They may record more.", src).flagged
    assert check_grounding("The deadline is in May.", src).unsupported == ("may",)


def test_superseded_needs_a_verb_of_change_or_instead_of() -> None:
    assert superseded_values("The meeting moved from Monday to Tuesday.") == [("monday", "tuesday")]
    assert superseded_values("We meet Friday instead of Thursday.") == [("thursday", "friday")]
    assert superseded_values("The shop is open from 9 to 5.") == []
    both = check_grounding("It moved from Thursday to Friday.", ["It moved from Thursday to Friday."])
    assert not both.flagged  # naming the new value too is fine


def test_names_are_checked_only_when_asked() -> None:
    answer = "Dana will bring the projector on Saturday."
    assert not check_grounding(answer, SAMPLE_CHUNKS).flagged
    assert check_grounding("Ask Zed, on Saturday.", SAMPLE_CHUNKS, names=True).unsupported == ("zed",)


def test_nothing_to_check() -> None:
    assert not check_grounding("", SAMPLE_CHUNKS).flagged
    assert not check_grounding("On Sunday.", []).flagged
