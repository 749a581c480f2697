"""Bearer tokens: 401 without or with a wrong token; each token's scope sees only its own
documents, answers and cached prefixes."""

from __future__ import annotations

from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.server.auth import Tokens, parse_tokens
from tests.server.conftest import MODEL, TOKENS, client, post_json, raw

openai = pytest.importorskip("openai")

ALICE, BOB = TOKENS["alice"], TOKENS["bob"]
DOCS = ["Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.",
        "Ben: the budget review is on Monday; travel costs are over plan."]
QUESTION = "When is the choir rehearsal?"
MESSAGES = [{"role": "system", "content": "You answer from Alice's private notes about Friday."},
            {"role": "user", "content": "When is the choir rehearsal this week?"}]


@pytest.mark.parametrize("key", [None, "wrong-secret", "Basic alice-secret"])
def test_missing_or_wrong_token_is_a_401(scoped_server: Any, key: str | None) -> None:
    headers = {"Authorization": key if key and " " in key else f"Bearer {key}"} if key else {}
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                         ("POST", "/v1/documents"), ("POST", "/v1/ask")):
        status, body = raw(scoped_server, method, path, b"{}", headers)
        assert status == 401, path
        assert body["error"]["code"] == "invalid_api_key" and body["error"]["type"] == "invalid_request_error"


def test_the_openai_client_sees_an_authentication_error(scoped_server: Any) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        client(scoped_server, "nope").models.list()
    assert info.value.status_code == 401
    assert [m.id for m in client(scoped_server, ALICE).models.list().data] == [MODEL]


def test_the_page_itself_needs_no_token(scoped_server: Any) -> None:
    import http.client

    conn = http.client.HTTPConnection(scoped_server.host, scoped_server.port, timeout=30)
    conn.request("GET", "/")
    r = conn.getresponse()
    assert r.status == 200 and b"<html" in r.read()
    conn.close()


def test_one_token_never_reads_another_scopes_documents_or_answers(pc: Any, scoped_server: Any) -> None:
    status, added = post_json(scoped_server, "/v1/documents", {"documents": DOCS}, ALICE)
    assert status == 200 and added["scope"] == "alice" and added["new_chunks"] >= 1
    ask = {"question": QUESTION, "max_tokens": 4}
    first = post_json(scoped_server, "/v1/ask", ask, ALICE)[1]
    assert first["source"] == "generated" and first["sources"]
    assert all(pc.knowledge.chunk(c).scope == "alice" for c in first["sources"])
    again = post_json(scoped_server, "/v1/ask", ask, ALICE)[1]
    assert again["source"] == "qa_bank" and again["percache"]["qa_bank_hit"]
    bob = post_json(scoped_server, "/v1/ask", ask, BOB)[1]
    assert bob["source"] == "no_documents" and bob["sources"] == [] and not bob["percache"]["qa_bank_hit"]
    assert bob["answer"] != first["answer"] and "alice" not in bob["answer"]
    # Bob's own documents are his alone.
    post_json(scoped_server, "/v1/documents", {"documents": ["Bob: the choir rehearsal is on Sunday."]}, BOB)
    bob = post_json(scoped_server, "/v1/ask", ask, BOB)[1]
    assert bob["sources"] and all(pc.knowledge.chunk(c).scope == "bob" for c in bob["sources"])
    assert bob["source"] != "qa_bank"


def test_cached_prefixes_are_not_shared_across_tokens(scoped_server: Any) -> None:
    def cached(key: str) -> int:
        r = client(scoped_server, key).chat.completions.create(model=MODEL, messages=MESSAGES,
                                                              temperature=0, max_tokens=2)
        return int(r.usage.prompt_tokens_details.cached_tokens)

    assert cached(ALICE) == 0
    assert cached(ALICE) > 0
    assert cached(BOB) == 0  # the same conversation from another token: nothing revealed
    assert cached(BOB) > 0


def test_shifted_reuse_never_serves_one_tokens_blocks_to_another() -> None:
    """``reuse="shifted"`` finds a block's tokens in any stored node; a server request reuses
    exactly, so another token (scoped or not) is never served Alice's K/V and learns nothing
    from ``cached_tokens``, and the answer stays plain generate's."""
    from tests.helpers import tiny_pair
    from tests.server.conftest import start

    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off", answer_grounding=False, reuse="shifted")
    tokens = Tokens(parse_tokens([*(f"{k}={v}" for k, v in TOKENS.items()), "unscoped-secret"]))
    srv = start(pc, default_max_tokens=2, tokens=tokens)
    try:
        def chat(key: str) -> Any:
            return client(srv, key).chat.completions.create(model=MODEL, messages=MESSAGES,
                                                           temperature=0, max_tokens=2)

        first = chat(ALICE)
        assert chat(ALICE).usage.prompt_tokens_details.cached_tokens > 0
        for key in (BOB, "unscoped-secret"):
            r = chat(key)
            assert r.usage.prompt_tokens_details.cached_tokens == 0, key
            assert r.percache["tokens_shifted"] == 0 and not r.percache["approximate"], key
            assert r.choices[0].message.content == first.choices[0].message.content
    finally:
        srv.stop()
        pc.close()


@pytest.mark.parametrize("reuse", ["exact", "shifted"])
def test_ask_reuses_no_other_tokens_document_kv(reuse: str) -> None:
    """The same document added by two tokens: Bob's ``/v1/ask`` is served nothing Alice's asks
    stored (``cached_tokens`` 0, as on a fresh server), then reuses what his own ask stored."""
    from tests.helpers import tiny_pair
    from tests.server.conftest import start

    model, tok = tiny_pair("llama")
    # no QA bank: the repeated question generates again, reusing K/V
    pc = percache.enable(model, tok, embedder="hash", predict="off", answer_grounding=False,
                         use_qa_bank=False, kv_warm=False, reuse=reuse)
    srv = start(pc, default_max_tokens=2, tokens=Tokens(parse_tokens(f"{k}={v}" for k, v in TOKENS.items())))
    try:
        def ask(key: str) -> Any:
            body = post_json(srv, "/v1/ask", {"question": QUESTION, "max_tokens": 2}, key)[1]
            assert body["source"] == "generated" and body["sources"]
            assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == body["percache"]["cached_tokens"]
            return body

        for key in (ALICE, BOB):
            assert post_json(srv, "/v1/documents", {"documents": DOCS[:1]}, key)[0] == 200
        assert ask(ALICE)["percache"]["cached_tokens"] == 0
        assert ask(ALICE)["percache"]["cached_tokens"] > 0
        bob = ask(BOB)["percache"]
        assert bob["cached_tokens"] == bob["tokens_reused"] == bob["tokens_shifted"] == 0
        assert ask(BOB)["percache"]["cached_tokens"] > 0
    finally:
        srv.stop()
        pc.close()
