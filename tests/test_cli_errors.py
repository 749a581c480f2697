"""Every command's bad input: exit code 2 and one line on stderr with a hint, no traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from percache_plugin.cli import main
from percache_plugin.cli_errors import UsageError

BAD_INPUT = {
    "unknown command": ["frobnicate"],
    "demo: bad option": ["demo", "--max-new-tokens", "many"],
    "demo: missing model": ["demo", "--model", "/nonexistent/model"],
    "plugins: stray argument": ["plugins", "extra"],
    "store: not a store": ["store", "info", "/nonexistent/store"],
    "store: unknown action": ["store", "explode", "/tmp"],
    "store remove: no --doc": ["store", "remove", "/nonexistent/store"],
    "conformance: no model": ["conformance"],
    "conformance: missing model": ["conformance", "/nonexistent/model"],
    "conformance: missing plugin file": ["conformance", "tiny:llama", "--plugin", "./nofile.py"],
    "bench ttft: no QMSum": ["bench", "ttft", "--data", "/nonexistent"],
    "bench splice: no QMSum": ["bench", "splice", "--data", "/nonexistent"],
    "bench qa: no QMSum": ["bench", "qa", "--data", "/nonexistent"],
    "bench idle: no QMSum": ["bench", "idle", "--data", "/nonexistent"],
    "bench e2e: no QMSum": ["bench", "e2e", "--data", "/nonexistent"],
    "bench buffer: bad block size": ["bench", "buffer", "--block-kib", "0"],
    "bench buffer: not a number": ["bench", "buffer", "--tokens", "many"],
    "store clear: no path": ["store", "clear"],
    "conformance: bad dtype": ["conformance", "tiny:llama", "--dtype", "float8"],
    "bench offload: no tokens": ["bench", "offload", "--tokens", "0"],
    "trace: missing file": ["trace", "/nonexistent/trace.csv"],
    "sizing: missing weights": ["sizing", "--ram", "10", "--weights", "/nonexistent"],
    "sizing: no loop": ["sizing", "--ram", "10"],
    "bench: no name": ["bench"],
}


@pytest.mark.parametrize("argv", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and "error: " in err and "hint" in err, err
    assert "Traceback" not in err


def test_bench_without_qmsum_says_where_to_put_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "ttft", "--data", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "needs the QMSum data set" in err and "--data PATH" in err and "QMSum" in err


def test_debug_shows_the_traceback() -> None:
    with pytest.raises(UsageError, match="not a percache store"):
        main(["--debug", "store", "info", "/nonexistent/store"])
    with pytest.raises(UsageError, match="not a percache store"):
        main(["store", "info", "/nonexistent/store", "--debug"])


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("percache ")


def test_help_is_fast(tmp_path: Path) -> None:
    """`percache --help` in a fresh process (the time a user waits)."""
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "percache_plugin.cli", "--help"], capture_output=True,
                         text=True, timeout=120)
    took = time.perf_counter() - t0
    assert res.returncode == 0 and "store" in res.stdout
    print(f"percache --help took {took:.2f} s")
