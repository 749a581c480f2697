"""The verify cost curve that learns from the handle's own forwards."""

from __future__ import annotations

import math

import pytest

import percache_plugin as percache
from percache_plugin.decode import Draft, DraftSchedule, MeasuredCost, VerifyCost
from tests.helpers import SEGMENTS, tiny_pair

PRIOR = VerifyCost((1.3, 1.25, 1.1, 1.15, 1.1, 1.25, 1.2, 1.2))  # k = 8 at 1.2, as the default curve


def test_without_observations_it_is_the_prior() -> None:
    m = MeasuredCost(PRIOR)
    assert [m(k) for k in range(9)] == pytest.approx([1.0, *PRIOR.ratios])
    m.observe(8, 0.2)  # no one-token time yet: a ratio cannot be formed
    assert m(8) == pytest.approx(1.2) and m.observed(8) is None


def test_each_k_moves_towards_its_measured_ratio_and_neighbours_less() -> None:
    m = MeasuredCost(PRIOR, weight=8.0)
    m.observe(0, 0.100)
    for _ in range(8):
        m.observe(8, 0.150)  # 1.5 one-token forwards, as at load
    assert m.observed(8) == pytest.approx((1.5, 8.0))
    assert m(8) == pytest.approx(math.sqrt(1.2 * 1.5))  # prior worth 8 observations: the geometric mean
    assert 1.2 < m(7) < m(8)  # a neighbour moves too, by less
    alone = MeasuredCost(PRIOR, spread=0.0)
    alone.observe(0, 0.100)
    alone.observe(8, 0.150)
    assert alone(7) == pytest.approx(1.2) and alone(8) > 1.2
    assert m(1) == pytest.approx(1.3, rel=0.01)  # a k far away keeps its prior
    for _ in range(200):
        m.observe(8, 0.150)
    assert m(8) == pytest.approx(math.exp((8 * math.log(1.2) + 40 * math.log(1.5)) / 48))  # capped at 40


def test_one_stalled_forward_moves_little_and_the_base_follows_the_load() -> None:
    m = MeasuredCost(PRIOR, weight=8.0, clip=(0.5, 4.0))
    m.observe(0, 0.1)
    m.observe(5, 100.0)  # clipped at 4x
    assert m(5) == pytest.approx(math.exp((8 * math.log(1.1) + math.log(4.0)) / 9))
    for _ in range(40):  # the machine slows down: one-token forwards take twice as long
        m.observe(0, 0.2)
    m.observe(3, 0.22)
    assert m.observed(3)[0] == pytest.approx(1.1, rel=0.01)  # type: ignore[index]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="weight"):
        MeasuredCost(PRIOR, weight=0)
    with pytest.raises(ValueError, match="clip"):
        MeasuredCost(PRIOR, clip=(2.0, 1.0))


def test_the_schedule_shortens_drafts_whose_forwards_cost_more_than_the_curve_says() -> None:
    # The fixed curve says 8 draft tokens cost 1.2 forwards: at p = 0.75 the schedule verifies 8.
    draft = Draft(tuple(range(8)), "prompt", 4)
    fixed = DraftSchedule(cost=PRIOR)
    assert fixed.length(draft) == 8
    measured = MeasuredCost(PRIOR)
    online = DraftSchedule(cost=measured)
    online.observe(0, 0.1)
    for _ in range(20):  # measured: k = 8 costs 1.6 forwards, as under load
        online.observe(8, 0.16)
    assert online.length(draft) == 5  # the cheap k = 5 now promises more per unit of cost
    fixed.observe(8, 0.16)  # a fixed curve ignores timings
    assert fixed.length(draft) == 8


def test_the_handle_learns_its_verify_cost_when_switched_on_unless_a_curve_is_given() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    pc.generate(SEGMENTS, max_new_tokens=16)
    assert pc.engine.drafts.measured == {}  # off by default
    pc.configure(draft_cost_online=True)
    pc.generate(SEGMENTS, max_new_tokens=16)
    learned = list(pc.engine.drafts.measured.values())
    assert len(learned) == 1 and learned[0]._log_base is not None  # one-token forwards were timed
    pc.configure(draft_cost_online=False)
    pc.engine.drafts.measured.clear()
    pc.generate(SEGMENTS, max_new_tokens=16)
    assert pc.engine.drafts.measured == {}
    pc.configure(draft_cost_online=True, draft_verify_cost=(1.0,))
    pc.generate(SEGMENTS, max_new_tokens=16)
    assert pc.engine.drafts.measured == {}  # a curve the caller gives is used as given
    pc.close()
