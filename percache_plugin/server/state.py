"""What every route needs: the handle, the runner, the model's name, the tokens, the limits."""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .auth import Tokens, check_local
from .errors import APIError
from .runner import Runner

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["ServerSettings", "ServerState", "read_json"]


@dataclass(frozen=True)
class ServerSettings:
    """Settings of one server.

    :ivar model_name: the id ``GET /v1/models`` lists and requests must name.
    :ivar tokens: bearer tokens and their scopes (empty: no authentication, loopback only).
    :ivar default_max_tokens: tokens generated when a request gives no ``max_tokens``
        (capped by the room left in the model's context).
    :ivar idle_worker: run percache's idle work (predictions, QA-bank refresh) between requests.
    :ivar max_question_chars: the longest question ``/v1/ask`` accepts.
    :ivar max_body_bytes: the largest request body read (413 beyond it).
    """

    model_name: str = "percache"
    tokens: Tokens = field(default_factory=Tokens)
    default_max_tokens: int = 256
    idle_worker: bool = False
    max_question_chars: int = 4000
    max_body_bytes: int = 32 * 1024 * 1024


class ServerState:
    """The handle ``pc`` and the :class:`Runner` that serves it one request at a time."""

    def __init__(self, pc: Any, settings: ServerSettings) -> None:
        self.pc = pc
        self.settings = settings
        self.runner = Runner(pc, idle_worker=settings.idle_worker)
        self.created = int(time.time())
        # Requests are rendered on the event loop while the runner's thread decodes: a tokenizer
        # is not safe to share across threads (a fast tokenizer's state is borrowed per call),
        # so the event loop renders with its own copy.
        self.tokenizer = copy.deepcopy(pc.tokenizer)

    def scope(self, request: Request) -> str | None:
        """The request's scope (its token's). :raises APIError: 401; 403 when the server has
        no token and the request comes from a page of another site (:func:`check_local`)."""
        if not self.settings.tokens.required:
            check_local(request.headers.get("host"), request.headers.get("origin"))
        return self.settings.tokens.scope_of(request.headers.get("authorization"))

    def check_model(self, name: str) -> None:
        """:raises APIError: 404 ``model_not_found`` for any other name than the served model's."""
        if name != self.settings.model_name:
            raise APIError(404, f"The model '{name}' does not exist; this server serves "
                           f"'{self.settings.model_name}' (GET /v1/models).", param="model",
                           code="model_not_found")

    async def body(self, request: Request) -> Any:
        """The request's JSON body (see :func:`read_json`)."""
        return await read_json(request, self.settings.max_body_bytes)

    def close(self) -> None:
        self.runner.close()


async def read_json(request: Request, limit: int) -> Any:
    """The decoded JSON body, read up to ``limit`` bytes.

    :raises APIError: 400 when it is empty or not JSON, 413 when it is larger than ``limit``."""
    too_large = APIError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise too_large
        parts.append(part)
    raw = b"".join(parts)
    if not raw.strip():
        raise APIError(400, "the request body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"We could not parse the JSON body of your request ({exc}). The OpenAI "
                       "API expects a JSON payload.") from None
