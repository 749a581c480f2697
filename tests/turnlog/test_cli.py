"""``percache memory export``: the turn log of a store as JSONL, from the command line."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.cli import main
from tests.helpers import tiny_pair


def test_export_sft_and_preference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, tok = tiny_pair("llama")
    store = tmp_path / "store"
    pc = percache.enable(model, tok, store=store)
    first = pc.chat("Hello there.", max_new_tokens=3)
    second = pc.chat("And then?", max_new_tokens=3)
    pc.chat("Unrated.", max_new_tokens=3)
    pc.feedback(first.turn_id, accepted=True)
    pc.feedback(second.turn_id, edited_text="A better reply.")
    pc.close()
    out = tmp_path / "sft.jsonl"
    assert main(["memory", "export", "--store", str(store), "--out", str(out)]) == 0
    assert "wrote 2 sft lines" in capsys.readouterr().out
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["messages"][-1] == {"role": "assistant", "content": first.text}
    assert lines[1]["messages"][-4:] == [
        {"role": "user", "content": "Hello there."}, {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And then?"}, {"role": "assistant", "content": "A better reply."}]
    pref = tmp_path / "pref.jsonl"
    assert main(["memory", "export", str(store), "--out", str(pref), "--format", "preference"]) == 0
    (line,) = [json.loads(x) for x in pref.read_text().splitlines()]
    assert line["chosen"][0]["content"] == "A better reply." and line["rejected"][0]["content"] == second.text


@pytest.mark.parametrize(("argv", "message"), [
    (["memory", "export", "--out", "x.jsonl"], "needs a store directory"),
    (["memory", "export", "{store}"], "needs --out FILE"),
    (["memory", "export", "{empty}", "--out", "x.jsonl"], "holds no chat turns"),
    (["memory", "export", "{store}", "--out", "x", "--format", "dpo"], "invalid choice: 'dpo'"),
    (["memory", "export", "{store}", "--out", "{empty}/nodir/x.jsonl"], "nodir'; create it first"),
])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                               message: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "sessions.sqlite").touch()
    (tmp_path / "empty").mkdir()
    argv = [a.format(store=store, empty=tmp_path / "empty") for a in argv]
    with pytest.raises(SystemExit) if "invalid choice" in message else contextlib.nullcontext():
        assert main(argv) == 2
    assert message in capsys.readouterr().err

