"""A server without tokens answers this machine only: a web page elsewhere cannot use it through
the user's browser, by a cross-site form-like POST (``Content-Type: text/plain`` needs no CORS
preflight) or by DNS rebinding (its own host name resolving to 127.0.0.1)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.server.conftest import MODEL, client, raw

DOC = {"documents": ["Injected: the door code is 0000."]}


def _post(srv: Any, path: str, body: Any, **headers: str) -> tuple[int, Any]:
    return raw(srv, "POST", path, json.dumps(body).encode(), headers)


@pytest.mark.parametrize("headers", [
    {"Content-Type": "text/plain", "Origin": "https://evil.example"},  # a cross-site page's POST
    {"Origin": "null"},  # a sandboxed frame or a local file
    {"Host": "evil.example:8000", "Origin": "http://evil.example:8000"},  # DNS rebinding
    {"Host": "evil.example"},
    {"Origin": "http://[::1"},  # malformed: refused, not a 500
])
def test_a_request_from_another_site_is_refused_and_changes_nothing(pc: Any, server: Any,
                                                                   headers: dict[str, str]) -> None:
    before = len(pc.knowledge)
    status, body = _post(server, "/v1/documents", DOC, **headers)
    assert status == 403 and body["error"]["code"] == "forbidden_origin", body
    status, body = _post(server, "/v1/ask", {"question": "What is the door code?"}, **headers)
    assert status == 403, body
    status, _ = raw(server, "GET", "/v1/models", headers=headers)
    assert status == 403
    assert len(pc.knowledge) == before


@pytest.mark.parametrize("origin", ["http://127.0.0.1:8000", "http://localhost:3000", "http://[::1]:8000", None])
def test_this_machine_and_clients_without_an_origin_are_served(server: Any, origin: str | None) -> None:
    headers = {"Origin": origin} if origin else {}
    status, body = _post(server, "/v1/documents", DOC, **headers)
    assert status == 200, body
    status, body = raw(server, "GET", "/v1/models", headers={"Host": "localhost", **headers})
    assert status == 200, body
    assert [m.id for m in client(server).models.list().data] == [MODEL]
