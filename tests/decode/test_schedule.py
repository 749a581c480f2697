"""The adaptive draft length: grow, shrink, pause after misses, resume."""

from __future__ import annotations

import pytest

from percache_plugin.decode import DraftSchedule


def test_grows_on_full_acceptance_and_shrinks_on_rejection() -> None:
    s = DraftSchedule(length=4, max_length=8)
    s.update(4, 4)
    assert s.budget() == 6
    s.update(6, 6)
    s.update(8, 8)
    assert s.budget() == 8  # capped
    s.update(8, 3)
    assert s.budget() == 7


def test_pauses_after_misses_and_backs_off() -> None:
    s = DraftSchedule(length=4, patience=2, cooldown=3)
    s.update(4, 0)
    assert s.budget() > 0
    s.update(3, 0)
    assert s.budget() == 0  # paused for 3 tokens
    s.tick(2)
    assert s.budget() == 0
    s.tick(1)
    assert s.budget() > 0
    s.update(2, 0)
    s.update(1, 0)
    s.tick(5)
    assert s.budget() == 0  # the second pause is twice as long
    s.tick(1)
    assert s.budget() > 0
    s.update(1, 1)  # an acceptance resets the back-off
    s.update(3, 0)
    s.update(2, 0)
    s.tick(3)
    assert s.budget() > 0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="length"):
        DraftSchedule(length=0)
    with pytest.raises(ValueError, match="patience"):
        DraftSchedule(patience=0)
