"""``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .formats import Format
from .jobs import run_ids
from .render import chat_ids, check_bias, max_new_tokens, text_ids
from .requests import ChatRequest, Sampling, parse_chat, parse_completion
from .respond import respond
from .state import ServerState
from .stream import TextStream

__all__ = ["openai_routes"]

Endpoint = Callable[[Request], Awaitable[Response]]


def openai_routes(state: ServerState) -> list[Route]:
    pc = state.pc

    def model_card() -> dict[str, Any]:
        return {"id": state.settings.model_name, "object": "model", "created": state.created,
                "owned_by": "percache"}

    async def models(request: Request) -> Response:
        state.scope(request)
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def model(request: Request) -> Response:
        state.scope(request)
        state.check_model(request.path_params["name"])
        return JSONResponse(model_card())

    async def generate(request: Request, kind: str, ids: list[int], sampling: Sampling,
                       scope: str | None, streaming: bool, include_usage: bool,
                       prediction: str | None) -> Response:
        arrived = time.perf_counter()
        check_bias(pc.tokenizer, sampling.logit_bias)
        max_new = max_new_tokens(pc.model, len(ids), sampling.max_tokens, state.settings.default_max_tokens,
                                 "messages" if kind == "chat" else "prompt", sampling.max_tokens_field)
        stream = TextStream(pc.tokenizer, len(ids), sampling.stop)

        def job(queue_s: float) -> Any:
            return run_ids(pc, ids, scope, sampling, max_new, stream, arrived, queue_s, prediction)

        return await respond(request, state.runner, kind, job, stream,
                             Format(kind, state.settings.model_name), streaming=streaming,
                             include_usage=include_usage)

    def endpoint(kind: str, parse: Callable[[Any], Any], ids_of: Callable[[Any], list[int]]) -> Endpoint:
        async def handle(request: Request) -> Response:
            scope = state.scope(request)
            req = parse(await state.body(request))
            state.check_model(req.model)
            return await generate(request, kind, ids_of(req), req.sampling, scope, req.stream,
                                  req.include_usage, req.prediction if isinstance(req, ChatRequest) else None)

        return handle

    chat = endpoint("chat", parse_chat, lambda req: chat_ids(state.tokenizer, req.messages))
    completions = endpoint("text", parse_completion, lambda req: text_ids(state.tokenizer, req.prompt))

    return [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{name:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
    ]
