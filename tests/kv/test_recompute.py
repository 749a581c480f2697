"""The built-in recompute strategies."""

from __future__ import annotations

import pytest
import torch

from percache_plugin.kv.recompute import RecomputeContext, parse_strategy


def _ctx(dev: list[float] | None = None) -> RecomputeContext:
    spans = ((10, 20), (20, 30))
    d = torch.tensor(dev) if dev is not None else torch.zeros(20)
    return RecomputeContext(spans, lambda layer: d)


def test_head_tail_none_all() -> None:
    ctx = _ctx()
    assert parse_strategy("none")(ctx) == []
    assert parse_strategy("all")(ctx) == list(range(10, 30))
    assert parse_strategy("head:2")(ctx) == [10, 11, 20, 21]
    assert parse_strategy("tail:2")(ctx) == [18, 19, 28, 29]
    assert parse_strategy("head:0.3")(ctx) == [10, 11, 12, 20, 21, 22]


def test_head_skips_a_chunk_that_starts_the_prompt() -> None:
    ctx = RecomputeContext(((0, 5), (5, 10)), lambda layer: torch.zeros(10))
    assert parse_strategy("head:1")(ctx) == [5]


def test_deviation_picks_the_largest() -> None:
    dev = [0.0] * 20
    dev[3], dev[15] = 5.0, 9.0
    assert parse_strategy("deviation:0.1")(_ctx(dev)) == [13, 25]


@pytest.mark.parametrize("spec", ["bogus", "head", "head:x", "deviation:2", "none:3"])
def test_bad_specs(spec: str) -> None:
    with pytest.raises(ValueError, match="recompute strategy"):
        parse_strategy(spec)
