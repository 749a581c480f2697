"""`percache conformance`: table, capability summary, JSON and exit codes."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

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
                                  ["tiny:llama", "--plugin", "no_such_module_xyz"]])
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    assert run(argv)[0] == 2


def test_unloadable_model_exit_2(tmp_path: Path) -> None:
    rc, _ = run([str(tmp_path / "missing-model"), *QUICK])
    assert rc == 2
