"""The demo's wording: notes already stored, paraphrases of predicted questions."""

from __future__ import annotations

from percache_plugin.demo import INTRO, notes_line, paraphrase


def test_notes_line_for_new_and_already_stored_notes() -> None:
    assert notes_line(3, 3) == "Added 3 new notes."
    assert notes_line(3, 0) == "0 new notes (3 already stored)."
    assert notes_line(3, 1) == "1 new note (2 already stored)."


def test_paraphrase_rewords() -> None:
    assert paraphrase("When is the choir rehearsal?") == "when's the choir rehearsal?"
    assert paraphrase("Who will bring the sheet music?") == "who will bring the sheet music ?"


def test_intro_calls_the_bundled_model_a_small_demo_model() -> None:
    assert "small demo model" in INTRO and "--model PATH_OR_ID" in INTRO
