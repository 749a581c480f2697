"""The turn log: rows, feedback, clear errors for unknown turns, owner-only and transactional."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from percache_plugin.turnlog import TurnLog, UnknownTurn, context_hash


def _append(log: TurnLog, turn_id: int, session: str = "s", **over: Any) -> Any:
    row: dict[str, Any] = dict(session=session, turn_id=turn_id, fingerprint="fp", persona=None, system="Be brief.",
                               history=[("hi", "hello")], message=f"m{turn_id}", output=f"o{turn_id}",
                               context_hash=context_hash([1, 2, turn_id]), prompt_tokens=3, fact_ids=[7, "x"],
                               latency_s=0.5, ttft_s=0.1)
    row.update(over)
    return log.append(**row)


def test_rows_round_trip_and_feedback_updates_in_place(tmp_path: Path) -> None:
    log = TurnLog(tmp_path / "log.sqlite")
    first = _append(log, 1)
    _append(log, 2)
    got = log.get(1, "s")
    assert got == first and got.history == (("hi", "hello"),) and got.fact_ids == (7, "x")
    assert got.accepted is None and got.edited_text is None and got.feedback_at is None
    after = log.feedback(1, "s", accepted=False)
    assert after.accepted is False and after.feedback_at is not None
    after = log.feedback(1, "s", edited_text="better")
    assert after.accepted is False and after.edited_text == "better"  # the other field is kept
    log.close()
    again = TurnLog(tmp_path / "log.sqlite")
    assert again.get(1, "s").edited_text == "better" and len(again) == 2
    assert [r.turn_id for r in again.records()] == [1, 2]
    again.close()


def test_unknown_turn_names_the_logged_ones() -> None:
    log = TurnLog(None)
    _append(log, 1)
    _append(log, 2)
    with pytest.raises(UnknownTurn, match=r"session 's' has no logged turn 9 \(turns 1 to 2 are logged\)"):
        log.feedback(9, "s", accepted=True)
    with pytest.raises(UnknownTurn, match="session 'other' has no logged turn 1 .no turn is logged"):
        log.feedback(1, "other", accepted=True)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, "needs accepted"),
    ({"accepted": "yes"}, "accepted must be"),
    ({"edited_text": "  "}, "edited_text must be"),
])
def test_bad_feedback_is_refused(kwargs: dict[str, Any], match: str) -> None:
    log = TurnLog(None)
    _append(log, 1)
    with pytest.raises(ValueError, match=match):
        log.feedback(1, "s", **kwargs)
    assert log.get(1, "s").feedback_at is None


def test_a_reset_session_reuses_turn_ids_feedback_goes_to_the_latest() -> None:
    log = TurnLog(None)
    old = _append(log, 1, output="old")
    new = _append(log, 1, output="new")
    assert log.feedback(1, "s", accepted=True).log_id == new.log_id
    assert [r.accepted for r in log.records()] == [None, True] and old.log_id < new.log_id


def test_files_are_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        log = TurnLog(tmp_path / "log.sqlite")
        _append(log, 1)
        log.feedback(1, "s", accepted=True)
    finally:
        os.umask(old)
    for f in tmp_path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    log.close()


def test_context_hash_is_of_the_ids() -> None:
    assert context_hash([1, 2, 3]) == context_hash([1, 2, 3]) != context_hash([1, 2, 4])
    assert context_hash([1, 23]) != context_hash([12, 3])
