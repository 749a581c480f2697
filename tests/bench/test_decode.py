"""bench decode's splits and mode choice (no model needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from percache_plugin.bench.decode import PARAPHRASES, _pairs, run_benchmark


def test_skip_gives_a_split_disjoint_from_the_first_meetings() -> None:
    dev = _pairs(PARAPHRASES, 5, 20)
    held_out = _pairs(PARAPHRASES, 5, 20, skip=5)
    assert sum(map(len, dev.values())) == 20 and sum(map(len, held_out.values())) == 20
    assert not set(dev) & set(held_out)
    assert list(_pairs(PARAPHRASES, 10, 999))[5:10] == list(_pairs(PARAPHRASES, 5, 999, skip=5))


def test_unknown_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown decode modes"):
        run_benchmark(None, None, Path("."), meetings=1, questions=1, new_tokens=1, repeats=1, modes=("nope",))
