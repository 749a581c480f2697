"""The ASGI application: OpenAI-compatible routes, documents and questions, the chat page,
and OpenAI-style error bodies for every refusal."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from .deps import require

require("starlette")

from starlette.applications import Starlette  # noqa: E402
from starlette.exceptions import HTTPException  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import HTMLResponse, JSONResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from .errors import APIError, error_body  # noqa: E402
from .routes_openai import openai_routes  # noqa: E402
from .routes_rag import rag_routes  # noqa: E402
from .state import ServerSettings, ServerState  # noqa: E402

__all__ = ["build_app", "page_html"]

log = logging.getLogger("percache.server")


def page_html() -> str:
    """The chat page (package data, no build step)."""
    return resources.files("percache_plugin.server").joinpath("static/index.html").read_text("utf-8")


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: f"Unknown request URL: {request.method} {request.url.path}.",
               405: f"Method {request.method} is not allowed for {request.url.path}."}
    return JSONResponse(error_body(message.get(exc.status_code, str(exc.detail)), "invalid_request_error"),
                        status_code=exc.status_code)


async def _value_error(request: Request, exc: Exception) -> Response:
    return JSONResponse(error_body(str(exc), "invalid_request_error"), status_code=400)


async def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("percache serve: %s %s failed", request.method, request.url.path)
    return JSONResponse(error_body(f"The server had an error while processing your request "
                                   f"({type(exc).__name__}: {exc}).", "server_error"), status_code=500)


def build_app(pc: Any, settings: ServerSettings | None = None) -> Starlette:
    """An ASGI app serving ``pc`` (a percache handle). ``app.state.server`` is the
    :class:`ServerState`; closing the app (lifespan shutdown) stops its runner, not ``pc``."""
    state = ServerState(pc, settings or ServerSettings())

    async def page(request: Request) -> Response:
        return HTMLResponse(page_html())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        state.close()

    app = Starlette(
        routes=[Route("/", page, methods=["GET"]), *openai_routes(state), *rag_routes(state)],
        exception_handlers={APIError: _api_error, HTTPException: _http_error,
                            ValueError: _value_error, Exception: _server_error},
        lifespan=lifespan,
    )
    app.state.server = state
    return app
