"""``percache serve`` refuses to listen beyond loopback without a token, before loading anything."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from percache_plugin.cli import main
from percache_plugin.server.auth import BindError, Tokens, check_bind, parse_tokens
from percache_plugin.server.serve import free_port

pytest.importorskip("uvicorn")


def test_a_public_bind_without_a_token_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--model", "tiny:llama"]) == 2
    err = capsys.readouterr()
    assert "refusing to listen on '0.0.0.0' without a token" in err.err
    assert "loading" not in err.out and "percache: loading" not in err.err


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_no_token(host: str) -> None:
    check_bind(host, Tokens())


def test_a_token_allows_a_public_bind() -> None:
    check_bind("0.0.0.0", Tokens(parse_tokens(["alice=s1"])))
    with pytest.raises(BindError):
        check_bind("192.168.1.5", Tokens())


@pytest.mark.parametrize("specs", [["alice="], ["=s1"], ["a=s1", "b=s1"]])
def test_bad_token_specs_are_refused(specs: list[str]) -> None:
    with pytest.raises(ValueError):
        parse_tokens(specs)


def test_percache_serve_starts_answers_and_stops(tmp_path: Any) -> None:
    """The console command end to end: a tiny model, a store directory, a token, SIGINT."""
    from tests.server.conftest import wait_for_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "percache_plugin.cli", "serve", "--model", "tiny:llama", "--port", str(port),
         "--store", str(tmp_path / "store"), "--token", "alice=s1", "--no-idle", "--log-level", "warning"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_port(port, proc, 120)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer s1"})
        body = json.loads(conn.getresponse().read())
        assert body["data"][0]["id"] == "tiny:llama"
        conn.request("POST", "/v1/completions", body=json.dumps(
            {"model": "tiny:llama", "prompt": "Hello", "max_tokens": 3, "temperature": 0}),
            headers={"Authorization": "Bearer s1", "Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 3
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert (tmp_path / "store").is_dir()
