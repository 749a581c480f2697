"""The cost-aware draft length: verify a draft only where its expected tokens pay for the forward."""

from __future__ import annotations

import pytest

from percache_plugin.decode import (
    AcceptanceHistory,
    Draft,
    DraftSchedule,
    Tally,
    VerifyCost,
    draft_kind,
)

TWICE = VerifyCost((2.0,))  # every verify forward costs two one-token forwards
RISING = VerifyCost((1.2, 1.4, 1.6, 1.8, 2.0, 5.0))  # a cliff after 5 draft tokens
EVEN = {"prior_accepted": 1.0, "prior_rejected": 1.0}  # p = 0.5 before anything is seen


def _draft(n: int = 16, source: str = "prompt", match: int = 4) -> Draft:
    return Draft(tuple(range(n)), source, match)


def test_a_kind_that_is_never_accepted_stops_being_proposed() -> None:
    s = DraftSchedule(cost=VerifyCost((1.1,)), **EVEN)
    d = _draft()
    assert s.length(d) == 16  # nearly free to verify: the longest draft
    for _ in range(60):
        k = s.length(d)
        if k == 0:
            break
        s.update(d, k, 0)
    assert s.length(d) == 0 and s.p(draft_kind(d)) < 0.1
    assert s.length(_draft(source="qa_bank")) > 0  # another source is judged on its own
    assert s.length(_draft(match=8)) > 0  # so is a longer match of the same source


def test_a_draft_is_verified_only_when_expected_tokens_pay_for_the_forward() -> None:
    # a draft of k tokens emits 1 + p + ... + p^k tokens for cost(k): with cost 2 that needs p > 0.5
    low = DraftSchedule(cost=TWICE, prior_accepted=4.0, prior_rejected=6.0)  # p = 0.4
    assert low.length(_draft()) == 0
    high = DraftSchedule(cost=TWICE, prior_accepted=8.0, prior_rejected=2.0)  # p = 0.8
    assert high.length(_draft()) == 16
    assert high.length(_draft(n=1)) == 0  # one token at most: 1.8 tokens for 2 forwards' cost


def test_the_cost_curve_caps_the_length() -> None:
    sure = DraftSchedule(cost=RISING, prior_accepted=99.0, prior_rejected=1.0)
    assert sure.length(_draft()) == 5  # the sixth token costs more than it can add
    assert DraftSchedule(cost=RISING, prior_accepted=99.0, prior_rejected=1.0, max_length=3).length(_draft()) == 3
    assert sure.length(_draft(n=2)) == 2  # never more than the draft has


def test_acceptance_raises_the_length_and_the_margin_raises_the_bar() -> None:
    s = DraftSchedule(cost=TWICE, **EVEN)
    d = _draft()
    assert s.length(d) == 0  # prior p = 0.5: no draft pays for twice the cost
    s.update(d, 8, 8)
    assert s.length(d) == 16  # p = 9/10 in this answer
    assert DraftSchedule(cost=TWICE, margin=5.0, tallies=s.tallies, **EVEN).length(d) == 0
    assert DraftSchedule(cost=TWICE).length(d) == 16  # the default prior starts optimistic (p = 0.75)


def test_history_across_answers_informs_the_next_answer() -> None:
    h = AcceptanceHistory(cap=20.0)
    first = DraftSchedule(cost=TWICE, history=h, **EVEN)
    d = _draft(source="qa_bank", match=0)
    first.update(d, 10, 10)
    h.merge(first.tallies)
    assert DraftSchedule(cost=TWICE, **EVEN).length(d) == 0
    assert DraftSchedule(cost=TWICE, history=h, **EVEN).length(d) > 0
    for _ in range(10):  # later answers where it failed outweigh the old success (capped history)
        h.merge({draft_kind(d): Tally(0.0, 3.0)})
    assert DraftSchedule(cost=TWICE, history=h, **EVEN).length(d) == 0
    assert h.get(draft_kind(d)).seen == pytest.approx(20.0)


def test_draft_kinds() -> None:
    assert draft_kind(Draft((1,), "qa_bank", 3, by_prefix=True)) == "qa_bank/prefix"
    assert [draft_kind(Draft((1,), "output", m)) for m in (1, 2, 3, 4, 7, 8, 16)] == [
        "output/1", "output/2", "output/3", "output/4", "output/4", "output/8", "output/8"]


def test_verify_cost_curve() -> None:
    assert RISING(0) == 1.0 and RISING(1) == 1.2 and RISING(6) == 5.0
    assert RISING(8) == pytest.approx(5.0 + 2 * (5.0 - 1.2) / 5)  # the mean slope continues it
    assert TWICE(40) == 2.0
    with pytest.raises(ValueError, match="at least one"):
        VerifyCost(())
    with pytest.raises(ValueError, match="positive"):
        VerifyCost((1.0, 0.0))


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_length"):
        DraftSchedule(max_length=0)
    with pytest.raises(ValueError, match="prior"):
        DraftSchedule(prior_rejected=0.0)
    with pytest.raises(ValueError, match="margin"):
        DraftSchedule(margin=0.0)
    with pytest.raises(ValueError, match="cap"):
        AcceptanceHistory(cap=0)


def test_choose_verifies_the_candidate_promising_most() -> None:
    weak, strong = Draft((1, 2, 3), "prompt", 2), Draft((4, 5, 6), "output", 4)
    sched = DraftSchedule(cost=VerifyCost((1.2,)), prior_accepted=1.0, prior_rejected=1.0)
    sched.tallies[draft_kind(weak)] = Tally(0.0, 20.0)  # always rejected
    sched.tallies[draft_kind(strong)] = Tally(30.0, 1.0)
    assert sched.choose([weak, strong]) == (strong, 3)
    assert sched.choose([weak]) == (None, 0) and sched.choose([]) == (None, 0)
