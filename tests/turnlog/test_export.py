"""JSONL export of the turn log: which turns become lines, the line layout, the file's mode."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from percache_plugin.turnlog import TurnLog, export_jsonl


def _log() -> TurnLog:
    log = TurnLog(None)
    for i, persona in enumerate(["a", "a", "b", "a"], start=1):
        log.append(session="s", turn_id=i, fingerprint="fp", persona=persona, system="Sys",
                   history=[(f"u{j}", f"r{j}") for j in range(1, i)], message=f"u{i}", output=f"r{i}",
                   context_hash="h", prompt_tokens=10, fact_ids=[i], latency_s=1.0, ttft_s=0.5)
    log.feedback(1, "s", accepted=True)
    log.feedback(2, "s", accepted=False, edited_text="better r2")
    log.feedback(3, "s", accepted=False)  # rejected without an edit: nothing to learn
    return log  # turn 4: no feedback


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sft_lines_are_accepted_replies_and_edits(tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    report = export_jsonl(_log().records(), out, "sft")
    assert (report.written, report.turns, report.skipped) == (2, 4, 2)
    first, second = _lines(out)
    assert first["messages"] == [{"role": "system", "content": "Sys"}, {"role": "user", "content": "u1"},
                                 {"role": "assistant", "content": "r1"}]
    assert second["messages"][-3:] == [{"role": "assistant", "content": "r1"}, {"role": "user", "content": "u2"},
                                       {"role": "assistant", "content": "better r2"}]
    assert first["meta"]["source"] == "accepted" and second["meta"]["source"] == "edited"
    assert second["meta"]["fact_ids"] == [2] and second["meta"]["persona"] == "a"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_preference_lines_put_the_edit_over_the_reply(tmp_path: Path) -> None:
    out = tmp_path / "pref.jsonl"
    report = export_jsonl(_log().records(persona="a"), out, "preference")
    assert (report.written, report.turns) == (1, 3)
    (line,) = _lines(out)
    assert line["prompt"][-1] == {"role": "user", "content": "u2"}
    assert line["chosen"] == [{"role": "assistant", "content": "better r2"}]
    assert line["rejected"] == [{"role": "assistant", "content": "r2"}]


def test_bad_format_and_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown export format 'dpo'"):
        export_jsonl([], tmp_path / "x", "dpo")
    with pytest.raises(ValueError, match="is a directory"):
        export_jsonl([], tmp_path, "sft")
    assert list(tmp_path.iterdir()) == []
