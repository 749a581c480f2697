"""The OpenAI-compatible routes driven by the official ``openai`` client: greedy output equals
plain generate and ``pc.chat``; streaming; multi-turn prefix reuse; stop sequences; refusals."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import pytest

from tests.helpers import baseline
from tests.server.conftest import MODEL, client, raw

openai = pytest.importorskip("openai")

SYSTEM = "Be brief. Answer the question from the notes you were given."
GREEDY = {"temperature": 0, "max_tokens": 6}


def _template_ids(pc: Any, messages: list[dict[str, str]]) -> list[int]:
    text = pc.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(pc.tokenizer(text, add_special_tokens=False)["input_ids"])


def _plain(pc: Any, ids: list[int], n: int) -> str:
    with pc.disabled():
        want, _ = baseline(pc.model, ids, n)
    return str(pc.tokenizer.decode(want, skip_special_tokens=True))


def test_models_lists_the_served_model(server: Any) -> None:
    models = client(server).models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client(server).models.retrieve(MODEL).id == MODEL


def test_chat_equals_plain_generate_and_pc_chat(pc: Any, server: Any) -> None:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "When is the rehearsal?"}]
    r = client(server).chat.completions.create(model=MODEL, messages=messages, **GREEDY)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    ids = _template_ids(pc, messages)
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 6
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content == _plain(pc, ids, 6)
    pc.sessions.create("s", system=SYSTEM)
    reply = pc.chat("When is the rehearsal?", session="s", max_new_tokens=6, do_sample=False)
    assert reply.prompt_ids == ids
    assert r.choices[0].message.content == pc.tokenizer.decode(reply.token_ids, skip_special_tokens=True)


def test_streaming_sends_the_same_text_in_openai_chunks(server: Any) -> None:
    messages = [{"role": "user", "content": "Who brings the projector to the rehearsal on Friday?"}]
    whole = client(server).chat.completions.create(model=MODEL, messages=messages, **GREEDY)
    chunks = list(client(server).chat.completions.create(
        model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    # The second identical request was served from the first one's prefix blocks.
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0


def test_multi_turn_reuses_the_conversation_prefix(pc: Any, server: Any) -> None:
    c = client(server)
    messages = [{"role": "system", "content": SYSTEM}]
    for turn, question in enumerate(["Hello, who are you?", "When is the rehearsal?", "And where?"]):
        messages.append({"role": "user", "content": question})
        r = c.chat.completions.create(model=MODEL, messages=messages, **GREEDY)
        answer = r.choices[0].message.content
        assert answer == _plain(pc, _template_ids(pc, messages), 6), f"turn {turn + 1}"
        cached = r.usage.prompt_tokens_details.cached_tokens
        assert (cached > 0) == (turn > 0), f"turn {turn + 1}: cached_tokens={cached}"
        assert cached % pc.config.prefix_block_tokens == 0 and cached < r.usage.prompt_tokens
        messages.append({"role": "assistant", "content": answer})


def _stop_in(text: str) -> tuple[int, str] | None:
    """A stop sequence (two characters if possible) first found after the answer's start."""
    for size in (2, 1):
        for i in range(1, len(text) - size + 1):
            stop = text[i:i + size]
            if "\ufffd" not in stop and text.find(stop) == i:
                return i, stop
    return None


def test_stop_sequence_cuts_the_answer(server: Any) -> None:
    c = client(server)
    for question in ("Hi", "What is on Friday?", "Who are you?", "List the meetings of this week."):
        messages = [{"role": "user", "content": question}]
        text = c.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                         max_tokens=16).choices[0].message.content
        found = _stop_in(text)
        if found:
            break
    assert found, "no answer of the random model has a usable stop sequence"
    at, stop = found
    for stream in (False, True):
        if stream:
            chunks = list(c.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                                    max_tokens=16, stop=[stop], stream=True))
            got = "".join(ch.choices[0].delta.content or "" for ch in chunks)
            reason = chunks[-1].choices[0].finish_reason
        else:
            r = c.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                          max_tokens=16, stop=stop)
            got, reason = r.choices[0].message.content, r.choices[0].finish_reason
        assert got == text[:at] and reason == "stop"


def test_completions_equal_pc_complete(pc: Any, server: Any) -> None:
    prompt = "Notes: the budget review is on Monday; Ben owns the slides. Q: who owns the slides? A:"
    r = client(server).completions.create(model=MODEL, prompt=prompt, **GREEDY)
    assert r.object == "text_completion"
    assert r.choices[0].text == pc.complete(prompt, max_new_tokens=6, do_sample=False).text
    streamed = "".join(ch.choices[0].text for ch in client(server).completions.create(
        model=MODEL, prompt=prompt, stream=True, **GREEDY))
    assert streamed == r.choices[0].text


def test_seeded_sampling_repeats(server: Any) -> None:
    messages = [{"role": "user", "content": "Say something."}]
    kw = {"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 1.0, "top_p": 0.9}
    a, b = (client(server).chat.completions.create(seed=7, **kw).choices[0].message.content for _ in range(2))
    assert a == b


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, 404, "model", "model_not_found"),
    ({"model": MODEL, "messages": []}, 400, "messages", "empty_array"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9000}, 400,
     "max_tokens", "context_length_exceeded"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 9000}, 400,
     "max_completion_tokens", "context_length_exceeded"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": True}},
     400, "stream_options", None),
    ({"model": MODEL, "messages": "hi"}, 400, "messages", "invalid_type"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 3}]}, 400, "messages[0].content", "invalid_type"),
    ({"model": MODEL, "messages": [{"role": "robot", "content": "hi"}]}, 400, "messages[0].role", "invalid_value"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, 400,
     "temperature", "invalid_type"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1.5}, 400,
     "max_tokens", "invalid_type"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, 400,
     "stream", "invalid_type"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "n", "unsupported_parameter"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stop": ["a"] * 5}, 400, "stop",
     "array_above_max_length"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "logit_bias": {"100000": 5}}, 400,
     "logit_bias", "integer_above_max_value"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 3}, 400,
     "temperature", "decimal_above_max_value"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "logprobs": True}, 400,
     "logprobs", "unsupported_parameter"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi", "name": "ana"}]}, 400, "messages[0].name",
     "unsupported_parameter"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}, 400,
     "messages[0].content[0]", "unsupported_content"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "extra_body": {"mirostat": 2}}, 400,
     "mirostat", "unknown_parameter"),
])
def test_bad_requests_get_openai_errors(server: Any, body: dict[str, Any], status: int,
                                        param: str, code: str | None) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client(server).chat.completions.create(**body)
    err = info.value
    assert err.status_code == status
    assert err.body["type"] == "invalid_request_error" and err.body["param"] == param
    assert err.body["code"] == code and err.body["message"]


@pytest.mark.parametrize("payload", [b"{not json", b"", b"[1, 2]", b"\xff\xfe"])
def test_malformed_json_is_a_400(server: Any, payload: bytes) -> None:
    status, body = raw(server, "POST", "/v1/chat/completions", payload)
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"]


def test_unknown_route_and_method_are_openai_errors(server: Any) -> None:
    status, body = raw(server, "GET", "/v1/nothing")
    assert status == 404 and body["error"]["message"].startswith("Unknown request URL")
    assert raw(server, "GET", "/v1/chat/completions")[0] == 405


def test_a_client_that_disconnects_frees_the_model(server: Any) -> None:
    body = {"model": MODEL, "prompt": "Tell a very long story.", "max_tokens": 4000,
            "temperature": 0, "stream": True}
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    got = [response.fp.readline() for _ in range(6)]
    assert response.status == 200 and any(line.startswith(b"data: ") for line in got)
    conn.sock.close()  # the client goes away mid-stream
    conn.close()
    t0 = time.perf_counter()
    r = client(server).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                               **GREEDY)
    waited = time.perf_counter() - t0
    assert r.choices[0].message.content is not None
    first = server.state.runner.records[0]
    assert first.finish_reason == "cancelled" and first.completion_tokens < 4000
    assert waited < 10, f"the next request waited {waited:.1f} s"


def test_a_non_streaming_client_that_disconnects_cancels_its_generation(server: Any) -> None:
    from tests.server.conftest import leave_while_running

    body = {"model": MODEL, "prompt": "Tell a very long story.", "max_tokens": 4000, "temperature": 0}
    record = leave_while_running(server, "/v1/completions", body)
    assert record.finish_reason == "cancelled" and record.completion_tokens < 4000
    assert server.state.runner.cancelled == 1
    r = client(server).completions.create(model=MODEL, prompt="hi", **GREEDY)
    assert r.choices[0].text is not None and server.state.runner.records[-1].finish_reason != "cancelled"


def test_a_body_over_the_limit_is_a_413(pc: Any) -> None:
    from tests.server.conftest import start

    srv = start(pc, max_body_bytes=1000)
    try:
        big = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 2000}]}).encode()
        status, body = raw(srv, "POST", "/v1/chat/completions", big)
        assert status == 413 and body["error"]["code"] == "request_too_large"
        ok = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert raw(srv, "POST", "/v1/chat/completions", ok.encode())[0] == 200
    finally:
        srv.stop()


def _open_stream(server: Any, body: dict[str, Any], *, first_event: bool) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    if first_event:  # the request runs: its first token arrived
        assert response.readline().startswith(b"data: ")
    return conn


def test_a_queued_request_whose_client_left_never_runs(server: Any) -> None:
    long = {"model": MODEL, "prompt": "Tell a very long story.", "max_tokens": 4000, "temperature": 0,
            "stream": True}
    running = _open_stream(server, long, first_event=True)
    queued = _open_stream(server, {**long, "prompt": "Another long story."}, first_event=False)
    queued.sock.close()  # leaves while the first request holds the model
    queued.close()
    time.sleep(0.3)
    running.sock.close()
    running.close()
    r = client(server).completions.create(model=MODEL, prompt="hi", **GREEDY)
    assert r.choices[0].text is not None
    first, second = list(server.state.runner.records)[:2]
    assert first.finish_reason == second.finish_reason == "cancelled"
    assert first.completion_tokens > 0 and second.completion_tokens == 0


def test_a_prompt_past_the_context_is_refused_naming_the_limit_and_the_field(pc: Any, server: Any) -> None:
    """The prompt alone over the context: OpenAI's ``context_length_exceeded`` naming the limit,
    and the field holding the prompt (``prompt`` on completions: it named ``messages``)."""
    from percache_plugin.decode.generate import context_limit

    limit = context_limit(pc.model)
    assert limit is not None
    c = client(server)
    for call, param in ((lambda: c.completions.create(model=MODEL, prompt="x" * (limit + 10)), "prompt"),
                        (lambda: c.chat.completions.create(model=MODEL, stream=True, messages=[
                            {"role": "user", "content": "x" * (limit + 10)}]), "messages")):
        with pytest.raises(openai.BadRequestError) as info:
            call()
        body = info.value.body
        assert body["param"] == param and body["code"] == "context_length_exceeded"
        assert f"maximum context length is {limit} tokens" in body["message"]


def test_completions_stream_usage_and_text_parts_match_their_plain_forms(server: Any) -> None:
    """A streamed completion with ``include_usage`` ends with the unstreamed request's usage; a
    message of text parts is the message of their joined text (same ids, same answer)."""
    c = client(server)
    prompt = "Notes: the budget review is on Monday. Q: when? A:"
    whole = c.completions.create(model=MODEL, prompt=prompt, **GREEDY)
    chunks = list(c.completions.create(model=MODEL, prompt=prompt, stream=True,
                                       stream_options={"include_usage": True}, **GREEDY))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == whole.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    parts = [{"type": "text", "text": "When is the rehearsal "}, {"type": "text", "text": "on Friday?"}]
    joined = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "When is the rehearsal on Friday?"}],
                                       **GREEDY)
    split = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": parts}], **GREEDY)
    assert split.choices[0].message.content == joined.choices[0].message.content
    assert split.usage.prompt_tokens == joined.usage.prompt_tokens
