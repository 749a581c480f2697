from collections import Counter

import pytest

from percache_plugin.bench.arm_order import (
    arm_orders,
    balanced_orders,
    balanced_repeats,
    predecessors,
)


@pytest.mark.parametrize("n", [2, 3, 5, 6, 7])
def test_every_arm_follows_every_other_arm_equally_often(n: int) -> None:
    arms = [f"a{i}" for i in range(n)]
    rows = balanced_orders(arms)
    assert len(rows) == balanced_repeats(n)
    assert all(sorted(r) == sorted(arms) for r in rows)
    pairs = Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
    assert set(pairs) == {(a, b) for a in arms for b in arms if a != b}
    assert len(set(pairs.values())) == 1
    # and every arm runs at every position equally often
    positions = Counter((r[i], i) for r in rows for i in range(n))
    assert len(set(positions.values())) == 1


def test_the_ttft_arms_are_balanced_over_six_repeats() -> None:
    from percache_plugin.bench.ttft import ARMS

    orders = arm_orders(ARMS, 12)
    assert balanced_repeats(len(ARMS)) == 6 and orders[6:] == orders[:6]
    before = predecessors(orders[:6])
    within = Counter(b["ram_tier"] for b, o in zip(before, orders, strict=False) if o[0] != "ram_tier")
    assert set(within) == set(ARMS) - {"ram_tier"} and set(within.values()) == {1}


def test_predecessors_cross_repeats() -> None:
    assert predecessors([["x", "y"], ["y", "x"]]) == [{"x": "start", "y": "x"}, {"y": "y", "x": "y"}]


def test_bad_arms_and_repeats_are_refused() -> None:
    with pytest.raises(ValueError, match="distinct"):
        balanced_orders(["a", "a"])
    with pytest.raises(ValueError, match="distinct"):
        balanced_orders([])
    with pytest.raises(ValueError, match="repeats"):
        arm_orders(["a"], -1)


def test_bench_ttft_groups_times_by_the_arm_run_before() -> None:
    from percache_plugin.bench.ttft import _by_predecessor

    orders = [["r", "c"], ["c", "r"], ["r", "c"], ["c", "r"]]
    arms = {"r": [1.0, 2.0, 3.0, 4.0], "c": [10.0, 20.0, 30.0, 40.0]}
    got = _by_predecessor(arms, predecessors(orders), ("r", "c"))
    assert got["r"] == {"start": (1.0, 1), "c": (3.0, 2), "r": (3.0, 1)}
    assert got["c"] == {"r": (20.0, 2), "c": (30.0, 2)}
