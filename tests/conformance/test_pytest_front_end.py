"""`pytest conformance --model ...`: one test per check, the capability table at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pytest_front_end_runs_one_test_per_check() -> None:
    env = {**os.environ, "PERCACHE_DISABLE_PLUGIN_AUTOLOAD": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "conformance",
         "--model", "tiny:gpt2", "-k", "exact_reuse or rope_shift or attention_switch"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "2 passed, 1 skipped" in res.stdout
    assert "rope_shift not applicable: gpt2: positions are 'learned'" in res.stdout
    assert "percache conformance: capabilities" in res.stdout
    assert "tiny:gpt2" in res.stdout
