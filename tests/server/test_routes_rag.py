"""``/v1/documents`` and ``/v1/ask``: documents go to the token's scope, answers stream, and
QA-bank hits and ``no_documents`` answers say so in the response."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.server.conftest import events, post_json

DOCS = ["Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.",
        {"text": "Carl will bring the projector on Friday.", "id": "carl", "metadata": {"from": "chat"}}]


def test_documents_are_added_once(server: Any) -> None:
    status, body = post_json(server, "/v1/documents", {"documents": DOCS})
    assert status == 200 and body["documents"] == 2 and body["new_chunks"] >= 2 and body["scope"] is None
    body = post_json(server, "/v1/documents", {"documents": DOCS})[1]
    assert body["new_chunks"] == 0 and body["duplicate_chunks"] >= 2


@pytest.mark.parametrize(("docs", "param"), [
    ([], "documents"), ("text", "documents"), ([""], "documents[0]"), ([3], "documents[0]"),
    ([{"text": "x", "scope": "bob"}], "documents[0]"),
    # a metadata value or an id of another type is the client's error (400), not the server's (500)
    (["y", {"text": "x", "metadata": {"a": 1}}], "documents[1].metadata"),
    ([{"text": "x", "metadata": "tag"}], "documents[0].metadata"),
    ([{"text": "x", "id": 5}], "documents[0].id"), ([{"text": "x", "id": ""}], "documents[0].id"),
])
def test_bad_documents_are_refused(server: Any, docs: Any, param: str) -> None:
    status, body = post_json(server, "/v1/documents", {"documents": docs})
    assert status == 400 and body["error"]["param"] == param


@pytest.mark.parametrize(("body", "param"), [({}, "question"), ({"question": 3}, "question"),
                                             ({"question": "q", "max_tokens": 0}, "max_tokens"),
                                             ({"question": "q", "stream": 1}, "stream")])
def test_bad_questions_are_refused(server: Any, body: dict[str, Any], param: str) -> None:
    status, got = post_json(server, "/v1/ask", body)
    assert status == 400 and got["error"]["param"] == param


def test_ask_streams_then_serves_the_qa_bank(pc: Any, server: Any) -> None:
    assert post_json(server, "/v1/ask", {"question": "When is the rehearsal?"})[1]["source"] == "no_documents"
    post_json(server, "/v1/documents", {"documents": DOCS})
    ask = {"question": "When is the choir rehearsal?", "max_tokens": 5, "stream": True}
    first = events(server, "/v1/ask", ask)
    assert first[-1] == "[DONE]"
    last = first[-2]
    assert last["object"] == "percache.answer.chunk" and last["source"] == "generated" and last["sources"]
    streamed = "".join(e["delta"] for e in first[:-1])
    assert streamed.strip() == last["answer"]
    assert last["percache"]["tokens_computed"] > 0 and not last["percache"]["qa_bank_hit"]
    second = events(server, "/v1/ask", ask)
    hit = second[-2]
    assert hit["source"] == "qa_bank" and hit["percache"]["qa_bank_hit"]
    assert hit["matched_question"] == "When is the choir rehearsal?"
    assert "".join(e["delta"] for e in second[:-1]) == last["answer"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_ask_whose_client_left_stops_and_stores_no_answer(pc: Any, server: Any, stream: bool) -> None:
    from tests.server.conftest import leave_while_running

    post_json(server, "/v1/documents", {"documents": DOCS})
    ask = {"question": "Tell me everything about the choir rehearsal.", "max_tokens": 4000, "stream": stream}
    record = leave_while_running(server, "/v1/ask", ask)
    assert record.finish_reason == "cancelled" and server.state.runner.cancelled == 1
    assert pc.qa_bank.entries() == []  # a cut answer is never stored, nor served later
    again = post_json(server, "/v1/ask", {**ask, "max_tokens": 3, "stream": False})[1]
    assert again["source"] == "generated" and len(pc.qa_bank.entries()) == 1


def test_the_idle_worker_runs_between_requests_and_yields_to_them(pc: Any) -> None:
    from tests.server.conftest import client, start

    srv = start(pc, default_max_tokens=4, idle_worker=True)
    try:
        post_json(srv, "/v1/documents", {"documents": DOCS})
        for q in ("Who brings the projector?", "Where is the rehearsal?", "When is the rehearsal?"):
            pc.idle_queue.push("answer", q, None)
        c = client(srv)
        for i in range(3):
            r = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": f"hi {i}"}],
                                          temperature=0, max_tokens=4)
            assert r.usage.completion_tokens == 4 and r.choices[0].finish_reason == "length"
        deadline = time.monotonic() + 20
        while pc.idle_queue.peek() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        srv.stop()
    report = srv.state.runner.idle_report
    assert report is not None and report.tasks_run >= 1, report
    assert [r.finish_reason for r in srv.state.runner.records][-3:] == ["length"] * 3


def test_a_streamed_answer_is_the_answer_whitespace_included(pc: Any, server: Any) -> None:
    """``pc.ask`` strips its answer: the stream holds back leading and trailing whitespace, so
    its deltas join to the answer the same request gets unstreamed (here all spaces: "")."""
    post_json(server, "/v1/documents", {"documents": DOCS})
    space = pc.tokenizer(" ", add_special_tokens=False)["input_ids"][-1]
    body = {"question": "When is the rehearsal?", "max_tokens": 6, "logit_bias": {str(space): 100}}
    whole = post_json(server, "/v1/ask", body)[1]
    streamed = [e for e in events(server, "/v1/ask", {**body, "stream": True}) if isinstance(e, dict)]
    assert whole["source"] == "generated" and whole["answer"] == ""
    assert "".join(e.get("delta", "") for e in streamed) == whole["answer"] == streamed[-1]["answer"]


def test_a_streamed_refusal_is_the_unstreamed_one(server: Any) -> None:
    """A request refused once it runs (the retrieved prompt plus ``max_tokens`` beyond the
    context) gets the same error body streamed as unstreamed: a client error, not a server one."""
    post_json(server, "/v1/documents", {"documents": DOCS})
    body = {"question": "When is the rehearsal?", "max_tokens": 100_000}
    status, whole = post_json(server, "/v1/ask", body)
    assert status == 400 and whole["error"]["type"] == "invalid_request_error"
    streamed = events(server, "/v1/ask", {**body, "stream": True})
    assert streamed[-2] == whole and streamed[-1] == "[DONE]"


def test_ask_caps_max_tokens_by_the_context_left_as_chat_does() -> None:
    """The retrieved prompt plus ``max_tokens`` beyond the context: a 400 naming ``max_tokens``
    with ``context_length_exceeded`` (it was a 400 with neither); no ``max_tokens``: the
    server's default capped by the room left (it was refused)."""
    import percache_plugin as percache
    from percache_plugin.decode.generate import context_limit
    from tests.helpers import tiny_pair
    from tests.server.conftest import start

    model, tok = tiny_pair("llama", max_position_embeddings=640)
    pc = percache.enable(model, tok, embedder="hash", predict="off", answer_grounding=False)
    srv = start(pc, default_max_tokens=1000)
    try:
        post_json(srv, "/v1/documents", {"documents": DOCS})
        eos = pc.model.generation_config.eos_token_id
        ask = {"question": "When is the rehearsal?", "logit_bias": {str(eos): -100}}  # runs to the end
        status, body = post_json(srv, "/v1/ask", {**ask, "max_tokens": 1000})
        assert status == 400, body
        err = body["error"]
        assert err["param"] == "max_tokens" and err["code"] == "context_length_exceeded"
        assert "640 tokens" in err["message"] and err["type"] == "invalid_request_error"
        status, body = post_json(srv, "/v1/ask", ask)
        assert status == 200, body
        assert body["source"] == "generated" and body["finish_reason"] == "length", body["usage"]
        used = body["usage"]
        assert used["prompt_tokens"] + used["completion_tokens"] == context_limit(pc.model) == 640
    finally:
        srv.stop()
        pc.close()
