"""Shutting the server down while requests stream or wait: every client gets an end it can
tell from a finished answer (an error event naming the shutdown, then ``data: [DONE]``; a 503
unstreamed), not a stream that stops."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

import pytest

from tests.server.conftest import MODEL, client, start

LONG = {"model": MODEL, "prompt": "Tell a very long story.", "max_tokens": 100_000 // 20, "temperature": 0}


def _open(srv: Any, body: dict[str, Any]) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn


def _events(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def _read(conn: http.client.HTTPConnection, into: dict[str, Any], key: str) -> None:
    r = conn.getresponse()
    try:
        into[key] = (r.status, r.read())
    except http.client.IncompleteRead as exc:  # the stream was cut
        into[key] = (r.status, exc.partial + b"<cut>")


def _shutdown_error(event: Any) -> bool:
    return isinstance(event, dict) and "error" in event and "shutting down" in event["error"]["message"] \
        and event["error"]["code"] == "server_shutting_down"


def test_shutdown_ends_running_and_queued_requests_with_an_error_then_done(pc: Any) -> None:
    eos = pc.model.generation_config.eos_token_id
    long = {**LONG, "logit_bias": {str(eos): -100}}  # runs past the shutdown's grace period
    srv = start(pc)
    runner = srv.state.runner
    got: dict[str, Any] = {}
    running = _open(srv, {**long, "stream": True})
    r = running.getresponse()
    assert r.status == 200 and r.readline().startswith(b"data: ")  # it holds the model
    queued = _open(srv, {**long, "stream": True, "prompt": "Another story."})
    waiting = _open(srv, {**long, "prompt": "A third story."})  # not streamed
    readers = [threading.Thread(target=_read, args=(c, got, k)) for c, k in ((queued, "queued"), (waiting, "waiting"))]

    def with_openai() -> None:  # the official client raises the error event
        openai = pytest.importorskip("openai")
        try:
            for _ in client(srv).completions.create(stream=True, **{**long, "prompt": "A fourth."}):
                pass
        except openai.APIError as exc:
            got["openai"] = exc

    readers.append(threading.Thread(target=with_openai))
    for t in readers:
        t.start()
    end = time.monotonic() + 30
    while runner.waiting < 4:
        assert time.monotonic() < end
        time.sleep(0.01)
    t0 = time.monotonic()
    stopper = threading.Thread(target=srv.stop)
    stopper.start()
    try:
        rest = r.read()
    except http.client.IncompleteRead as exc:
        rest = exc.partial + b"<cut>"
    for t in (*readers, stopper):
        t.join(60)
    took = time.monotonic() - t0
    assert not rest.endswith(b"<cut>"), rest[-300:]
    first = _events(rest)
    assert first[-1] == "[DONE]" and _shutdown_error(first[-2]), first[-3:]
    status, body = got["queued"]
    events = _events(body)
    assert status == 200 and not body.endswith(b"<cut>") and len(events) == 2
    assert _shutdown_error(events[0]) and events[1] == "[DONE]"
    status, body = got["waiting"]
    assert status == 503 and _shutdown_error(json.loads(body))
    exc = got["openai"]
    assert "shutting down" in exc.message and exc.body["code"] == "server_shutting_down"
    assert took < 15, f"shutting down took {took:.1f} s"
    reasons = sorted(rec.finish_reason for rec in runner.records)
    assert reasons == ["shutdown"] * 4, reasons


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_finishing_within_the_grace_period_gets_its_answer(pc: Any, stream: bool) -> None:
    srv = start(pc)
    conn = _open(srv, {**LONG, "max_tokens": 8, "stream": stream})
    got: dict[str, Any] = {}
    reader = threading.Thread(target=_read, args=(conn, got, "r"))
    reader.start()
    end = time.monotonic() + 30
    while srv.state.runner.waiting == 0 and srv.state.runner.finished == 0:
        assert time.monotonic() < end
        time.sleep(0.005)
    srv.stop()
    reader.join(60)
    status, body = got["r"]
    assert status == 200
    if stream:
        events = _events(body)
        assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] in ("length", "stop")
    else:
        assert json.loads(body)["usage"]["completion_tokens"] >= 1
