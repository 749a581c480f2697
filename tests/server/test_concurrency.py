"""Concurrent requests that differ in token (scope), system prompt, stop sequences, bias,
``prediction`` (drafting), sampling seed and streaming each get exactly the answer they get
alone, one after the other: no request runs with another's settings or receives its text."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from tests.server.conftest import MODEL, TOKENS, events, post_json

KEYS = [TOKENS["alice"], TOKENS["bob"]]
SYSTEMS = ["You are a pirate.", "You are a lawyer.", "Be brief."]
ASCII = {str(i): 100 for i in range(4, 98)}  # printable bytes: drafts from the prediction can match


def _body(i: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL, "temperature": 0.9 if i % 5 == 4 else 0, "seed": 7 * i, "max_tokens": 10 + i % 4,
        "messages": [{"role": "system", "content": SYSTEMS[i % 3]},
                     {"role": "user", "content": f"Question {i}: when is the rehearsal?"}]}
    if i % 2:
        body["logit_bias"] = ASCII
    if i % 4 == 1:
        body["stop"] = ["e", "a "]
    if i % 3 == 0:
        body["prediction"] = {"type": "content", "content": f"Question {i}: the rehearsal is on Friday"}
    return body


def _run(srv: Any, i: int, stream: bool, key: str | None = "") -> tuple[str, str]:
    key = KEYS[i % 2] if key == "" else key
    if stream:
        chunks = [e for e in events(srv, "/v1/chat/completions", {**_body(i), "stream": True}, key)
                  if isinstance(e, dict) and e.get("choices")]
        return ("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks),
                chunks[-1]["choices"][0]["finish_reason"])
    status, r = post_json(srv, "/v1/chat/completions", _body(i), key)
    assert status == 200, r
    return r["choices"][0]["message"]["content"], r["choices"][0]["finish_reason"]


def test_concurrent_requests_each_get_their_sequential_answer(scoped_server: Any) -> None:
    n = 10
    alone = {i: _run(scoped_server, i, False) for i in range(n)}
    got: dict[tuple[int, bool], tuple[str, str]] = {}
    threads = [threading.Thread(target=lambda i=i, s=s: got.__setitem__((i, s), _run(scoped_server, i, s)))
               for i in range(n) for s in (False, True)]
    random.Random(1).shuffle(threads)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2 * n
    assert {k: v for k, v in got.items() if v != alone[k[0]]} == {}


def test_server_requests_never_run_under_a_persona_turns_adapter(tmp_path: Any) -> None:
    """``pc.chat`` turns under LoRA personas in other threads switch the model's adapter: the
    switch and the turn hold the model's lock, so a server request in between runs on the base
    weights (its sequential answer), and each turn gets its own sequential reply."""
    pytest.importorskip("peft")
    import percache_plugin as percache
    from tests.personas.loras import llama_with_loras
    from tests.server.conftest import start

    model, tok, dirs, _ = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok, embedder="hash", predict="off", answer_grounding=False)
    srv = start(pc, default_max_tokens=8)
    try:
        for name in ("a", "b"):
            pc.personas.add(name, f"You are {name}.", dirs[name])

        def turn(j: int, prefix: str) -> str:
            return str(pc.chat(f"hi {j}", session=f"{prefix}{j}", persona="ab"[j % 2], max_new_tokens=6,
                               do_sample=False).text)

        for j in range(4):
            pc.sessions.create(f"alone{j}")
            pc.sessions.create(f"busy{j}")
        alone = {i: _run(srv, i, False, None) for i in range(6)}
        replies = {j: turn(j, "alone") for j in range(4)}
        got: dict[Any, str] = {}
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, _run(srv, i, False, None)[0]))
                   for i in range(6)]
        threads += [threading.Thread(target=lambda j=j: got.__setitem__(("turn", j), turn(j, "busy")))
                    for j in range(4)]
        random.Random(2).shuffle(threads)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {i: got[i] for i in range(6)} == {i: alone[i][0] for i in range(6)}
        assert {j: got[("turn", j)] for j in range(4)} == replies
    finally:
        srv.stop()
        pc.close()
