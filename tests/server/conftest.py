"""A server over a tiny random Llama (byte tokenizer with a chat template) on a free loopback
port, and the official ``openai`` client pointed at it."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

import percache_plugin as percache
from tests.helpers import tiny_pair

pytest.importorskip("starlette", reason="pip install 'percache-plugin[server]'")
pytest.importorskip("uvicorn", reason="pip install 'percache-plugin[server]'")

from percache_plugin.server.auth import Tokens, parse_tokens  # noqa: E402
from percache_plugin.server.serve import ServerThread  # noqa: E402
from percache_plugin.server.state import ServerSettings  # noqa: E402

MODEL = "tiny"
TOKENS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture
def pc() -> Iterator[Any]:
    model, tok = tiny_pair("llama")
    # answer_grounding off: a random model's stray digits would flag every answer
    handle = percache.enable(model, tok, embedder="hash", predict="off", answer_grounding=False)
    yield handle
    handle.close()


def start(pc: Any, **settings: Any) -> ServerThread:
    return ServerThread(pc, ServerSettings(model_name=MODEL, **settings)).start()


@pytest.fixture
def server(pc: Any) -> Iterator[ServerThread]:
    srv = start(pc, default_max_tokens=8)
    yield srv
    srv.stop()


@pytest.fixture
def scoped_server(pc: Any) -> Iterator[ServerThread]:
    tokens = Tokens(parse_tokens(f"{k}={v}" for k, v in TOKENS.items()))
    srv = start(pc, default_max_tokens=8, tokens=tokens)
    yield srv
    srv.stop()


def client(srv: ServerThread, key: str = "unused") -> Any:
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=60)


def raw(srv: ServerThread, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One plain HTTP request (stdlib only): status and decoded JSON body."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def post_json(srv: ServerThread, path: str, body: Any, key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return raw(srv, "POST", path, json.dumps(body).encode(), headers)


def events(srv: ServerThread, path: str, body: Any, key: str | None = None) -> list[Any]:
    """The server-sent events of a streamed request, decoded (``"[DONE]"`` kept as a string)."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        r = conn.getresponse()
        assert r.status == 200, r.read()
        out: list[Any] = []
        for line in r.read().decode().splitlines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                out.append(data if data == "[DONE]" else json.loads(data))
        return out
    finally:
        conn.close()


def wait_for_port(port: int, proc: Any, timeout: float) -> None:
    """Wait until something listens on the loopback ``port`` (or ``proc`` exits)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stdout.read() if proc.stdout else ''}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


def leave_while_running(srv: ServerThread, path: str, body: Any, timeout: float = 300) -> Any:
    """Send ``body``, close the connection once its job runs (a streamed request: after its
    first event), and wait until the job has finished; its :class:`JobRecord`."""
    runner = srv.state.runner
    done = runner.finished
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    if body.get("stream"):
        response = conn.getresponse()
        assert response.status == 200 and response.readline().startswith(b"data: ")
    else:
        end = time.monotonic() + timeout
        while runner.waiting == 0 and runner.finished == done and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.3)  # some tokens into the answer
    conn.sock.close()  # the client goes away
    conn.close()
    end = time.monotonic() + timeout
    while runner.finished == done:
        assert time.monotonic() < end, "the job did not finish"
        time.sleep(0.05)
    return runner.records[-1]
