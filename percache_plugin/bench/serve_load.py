"""Load for ``percache bench serve``: concurrent chat clients streaming from a server for a
bounded time (stdlib HTTP only), each resending its whole conversation every turn as chat
clients do; what each request got and how long it took."""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Request", "Script", "stream_chat", "run_load", "percentile"]


@dataclass
class Request:
    """One streamed chat request as the client saw it.

    :ivar key: (client, conversation, turn): the same key asks the same conversation in every arm.
    :ivar complete: the stream ended with a finish reason and ``[DONE]``, no error event.
    """

    key: tuple[int, int, int]
    text: str = ""
    complete: bool = False
    error: str = ""
    ttft_s: float | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None


@dataclass(frozen=True)
class Script:
    """What the clients say: a shared system prompt and, per client, user turns (a new
    conversation starts after ``turns`` turns)."""

    system: str
    questions: tuple[str, ...]
    turns: int
    max_tokens: int
    model: str

    def message(self, client: int, conversation: int, turn: int) -> str:
        q = self.questions[(client + conversation + turn) % len(self.questions)]
        return f"{q} (client {client}, conversation {conversation})" if turn == 0 else q


def stream_chat(host: str, port: int, body: dict[str, Any], req: Request, timeout: float = 600) -> Request:
    """POST a streamed chat completion; fill ``req`` with the text, TTFT and outcome."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            req.error = f"HTTP {r.status}: {r.read()[:200]!r}"
            return req
        parts: list[str] = []
        done = False
        while line := r.fp.readline():
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                req.error = str(event["error"].get("message"))
                continue
            for choice in event.get("choices", []):
                content = choice.get("delta", {}).get("content")
                if content:
                    if req.ttft_s is None:
                        req.ttft_s = time.perf_counter() - t0
                    parts.append(content)
                if choice.get("finish_reason"):
                    req.finish_reason = choice["finish_reason"]
            if event.get("usage"):
                req.prompt_tokens = int(event["usage"]["prompt_tokens"])
                req.cached_tokens = int(event["usage"]["prompt_tokens_details"]["cached_tokens"])
        req.text = "".join(parts)
        req.complete = done and req.finish_reason is not None and not req.error
    except (OSError, ValueError) as exc:
        req.error = f"{type(exc).__name__}: {exc}"
    finally:
        req.latency_s = time.perf_counter() - t0
        conn.close()
    return req


def _client(host: str, port: int, script: Script, client: int, deadline: float,
            out: list[Request], lock: threading.Lock) -> None:
    conversation = 0
    while time.perf_counter() < deadline:
        messages: list[dict[str, str]] = [{"role": "system", "content": script.system}]
        for turn in range(script.turns):
            if time.perf_counter() >= deadline:
                return
            messages.append({"role": "user", "content": script.message(client, conversation, turn)})
            body = {"model": script.model, "messages": messages, "max_tokens": script.max_tokens,
                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
            req = stream_chat(host, port, body, Request((client, conversation, turn)))
            with lock:
                out.append(req)
            if not req.complete:
                break
            messages.append({"role": "assistant", "content": req.text})
        conversation += 1


def run_load(host: str, port: int, script: Script, clients: int, duration_s: float) -> tuple[list[Request], float]:
    """``clients`` threads for ``duration_s`` (requests in flight at the end finish); the requests
    and the wall time."""
    out: list[Request] = []
    lock = threading.Lock()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=_client, args=(host, port, script, c, t0 + duration_s, out, lock),
                                daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.perf_counter() - t0


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank); nan for no values."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]
