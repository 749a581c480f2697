"""`percache conformance`: table, capability summary, JSON and exit codes."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from percache_plugin.cli import main
from percache_plugin.conformance import cli

QUICK = ["--threads", "1", "--check", "exact_reuse", "--check", "rope_shift"]


def run(argv: list[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="percache")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.add_arguments(sub.add_parser("conformance"))
    out = io.StringIO()
    return cli.run(parser.parse_args(["conformance", *argv]), out), out.getvalue()


def test_passing_model_exit_0_with_table_and_json(tmp_path: Path) -> None:
    rc, text = run(["tiny:phi3", *QUICK, "--json", str(tmp_path / "out.json")])
    assert rc == 0, text
    assert "[ 1/2] exact_reuse" in text and "[ 2/2] rope_shift" in text
    assert "check                  status figure" in text
    assert "capability exact_reuse: supported" in text
    assert "Capabilities" in text and "tiny:phi3" in text
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["ok"] is True
    checks = data["models"][0]["checks"]
    assert [c["name"] for c in checks] == ["exact_reuse", "rope_shift"]
    assert all(c["status"] == "pass" for c in checks)
    assert len(checks[1]["details"]["per_layer"]) == 3


def test_failing_check_exit_1(tmp_path: Path) -> None:
    rc, text = run(["tiny:llama", *QUICK, "--plugin", "tests.conformance.plugins:WrongLayout"])
    assert rc == 1
    assert "rope_shift             fail" in text
    assert "FAIL: 1/2 checks ok, failed: rope_shift" in text


@pytest.mark.parametrize("argv", [[], ["tiny:llama", "--builtin"], ["tiny:llama", "--threads", "0"],
                                  ["tiny:llama", "--plugin", "no_such_module_xyz"],
                                  ["tiny:llama", "--plugin", "./no_such_file.py"],
                                  ["tiny:llama", "--plugin", "tests.conformance.plugins:Nope"]])
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("percache: error: ") and err.count("\n") == 1 and "hint" in err


def test_plugin_from_a_bad_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("def (:\n")
    assert main(["conformance", "tiny:llama", "--plugin", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "cannot import plugin" in err and "SyntaxError" in err and err.count("\n") == 1


def test_a_plugin_pluggy_refuses_exit_2_naming_it(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "extra_arg_plugin.py"
    bad.write_text("from percache_plugin import hookimpl\n\n\n@hookimpl\n"
                   "def percache_attention(ctx, module, query, key, value, attention_mask, kwargs, extra):\n"
                   "    return None\n")
    # Before, a traceback from pluggy's registration.
    assert main(["conformance", "tiny:llama", "--plugin", str(bad), *QUICK]) == 2
    err = capsys.readouterr().err
    assert err.startswith("percache: error: Plugin 'percache_plugin_file_extra_arg_plugin'")
    assert "'extra'" in err and err.count("\n") == 1


def test_plugin_from_a_file(tmp_path: Path) -> None:
    good = tmp_path / "myplugin.py"
    good.write_text("class Nothing:\n    pass\n")
    rc, _ = run(["tiny:llama", "--threads", "1", "--check", "exact_reuse", "--plugin", f"{good}:Nothing"])
    assert rc == 0


@pytest.mark.parametrize("model", ["/nonexistent/model", "./missing-model"])
def test_missing_model_exit_2(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", model, *QUICK]) == 2
    err = capsys.readouterr().err
    assert f"no model at {model!r}" in err and err.count("\n") == 1
