from __future__ import annotations

import pytest

from percache_plugin.rag.guards import (
    REASONS,
    check_min_overlap,
    check_tau,
    judge,
    question_terms,
    source_overlap,
    terms_agree,
)


def test_source_overlap_is_the_share_of_sources_retrieved_again() -> None:
    assert source_overlap(["a", "x", "y"], ["a", "b", "c"]) == pytest.approx(1 / 3)
    assert source_overlap(["a", "b", "c"], ["a", "b"]) == 1.0
    assert source_overlap([], ["a"]) == 0.0
    assert source_overlap(["x"], []) == 1.0  # nothing to contradict
    assert source_overlap(["a"], ["a", "a", "b"]) == 0.5  # sources counted once


def judged(similarity: float = 0.9, **kw: object) -> tuple[dict[str, bool | float], str | None]:
    args: dict[str, object] = dict(
        tau=0.8, stale=False, answered=True, sources=["a"], retrieved=None, min_overlap=0.5
    )
    args.update(kw)
    verdict = judge(similarity, **args)  # type: ignore[arg-type]
    return dict(verdict.guards), verdict.rejected_by


def test_judge_passes_a_good_candidate_and_reports_every_guard() -> None:
    guards, reason = judged(retrieved=["a", "z"], terms=True)
    assert reason is None
    assert guards == {
        "threshold": True,
        "scope": True,
        "fresh": True,
        "answered": True,
        "terms": True,
        "overlap": 1.0,
        "consistency": True,
    }
    guards, reason = judged()
    assert reason is None and "consistency" not in guards and "terms" not in guards


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"similarity": 0.79}, "threshold"),
        ({"terms": False}, "terms"),
        ({"stale": True}, "stale"),
        ({"answered": False}, "no_answer"),
        ({"retrieved": ["z"]}, "consistency"),
    ],
)
def test_judge_names_the_failed_guard(kw: dict[str, object], reason: str) -> None:
    assert judged(**kw)[1] == reason  # type: ignore[arg-type]


def test_judge_reports_the_first_failure_in_guard_order() -> None:
    _, reason = judged(0.1, terms=False, stale=True, answered=False, retrieved=["z"])
    assert reason == "threshold"
    _, reason = judged(stale=True, answered=False, retrieved=["z"])
    assert reason == "stale"
    assert REASONS.index("threshold") < REASONS.index("terms") < REASONS.index("consistency")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("When did Caroline go to the support group?", {"caroline"}),
        ("What did Grad B say about the structure?", {"grad", "b"}),
        (
            "Why did Hon. Bill Blair support banning Iver Johnson?",
            {"bill", "blair", "iver", "johnson"},
        ),
        ("VAD results? Summarize the discussion.", {"vad"}),
        ("What happened in 2019? I forgot.", {"2019"}),
        ("Summarize the whole meeting.", set()),
        ("What did David say yesterday about the holidays?", {"david", "yesterday", "holiday"}),
        ("what changed this week?", {"week"}),
    ],
)
def test_question_terms_finds_names_acronyms_and_numbers(text: str, key: set[str]) -> None:
    assert set(question_terms(text).key) == key


def test_an_ordinal_date_agrees_with_the_same_date_in_digits() -> None:
    stored = question_terms("What news did Evan share with Sam on 9th December 2023?")
    assert terms_agree(question_terms("What did Evan tell Sam on December 9, 2023?"), stored)
    assert not terms_agree(question_terms("What did Evan tell Sam on December 19, 2023?"), stored)
    assert question_terms("the 1st of September").key == {"1", "september"}


def test_terms_agree_is_symmetric_and_case_insensitive() -> None:
    stored = question_terms("What did the Professor think about the use of English?")
    assert terms_agree(question_terms("What was the professor's opinion on using English?"), stored)
    assert not terms_agree(question_terms("What did PhD A think about the use of English?"), stored)
    general = question_terms("What did they think about the use of english?")
    assert not terms_agree(general, stored)  # the stored answer is one person's view
    assert terms_agree(question_terms("what did the professor think about english"), stored)
    assert terms_agree(question_terms("Summarize the meeting"), question_terms("Recap the meeting"))
    today = question_terms("What did David say about the tax return this morning?")
    assert not terms_agree(
        today, question_terms("What did David say about the tax return yesterday?")
    )
    assert not terms_agree(today, question_terms("What did David say about the tax return?"))


def test_checks_reject_out_of_range_values() -> None:
    assert check_tau(1) == 1.0 and check_min_overlap(0) == 0.0
    for bad in (1.01, -2, True, "0.8", None):
        with pytest.raises(ValueError, match="tau"):
            check_tau(bad)
    for bad in (-0.1, 1.5, False, "1"):
        with pytest.raises(ValueError, match="min_overlap"):
            check_min_overlap(bad)
