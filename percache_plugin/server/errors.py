"""OpenAI-style errors: an exception carrying the status code and the ``{"error": ...}`` body."""

from __future__ import annotations

from typing import Any

__all__ = ["APIError", "error_body", "shutting_down"]


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """The JSON body OpenAI's API answers an error with (what its client libraries parse)."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class APIError(Exception):
    """A request the server refuses: ``status`` and an OpenAI-style body (:func:`error_body`).

    :ivar status: the HTTP status code (400 bad request, 401 no or wrong token, 404 unknown
        model or route, 503 the model is closed).
    """

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def shutting_down() -> APIError:
    """A request the server did not complete because it is shutting down (503; streamed: an
    error event before ``[DONE]``), so a client can tell it from a finished answer."""
    return APIError(503, "The server is shutting down; the request was not completed. Send it "
                    "again once the server is back.", type_="server_error", code="server_shutting_down")
