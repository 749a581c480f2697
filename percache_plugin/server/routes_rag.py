"""Documents and questions over HTTP, in the token's scope: ``POST /v1/documents`` adds
documents, ``POST /v1/ask`` answers with retrieval and the QA bank (``pc.ask``)."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .checks import require_object
from .errors import APIError
from .formats import Format
from .jobs import run_ask
from .render import check_bias
from .requests import parse_ask
from .respond import respond, result
from .state import ServerState
from .stream import TextStream

__all__ = ["rag_routes", "parse_documents"]

_DOC_KEYS = {"text", "id", "metadata"}


def parse_documents(body: Any) -> list[str | dict[str, Any]]:
    """``{"documents": [text | {"text", "id"?, "metadata"?}, ...]}`` checked; a document cannot
    name a scope (it takes the token's). :raises APIError: 400 naming the document at fault."""
    docs = require_object(body).get("documents")
    if not isinstance(docs, list) or not docs:
        raise APIError(400, "'documents' must be a non-empty array of texts or {'text': ...} objects",
                       param="documents")
    for i, d in enumerate(docs):
        if isinstance(d, str) and d.strip():
            continue
        if isinstance(d, dict) and isinstance(d.get("text"), str) and d["text"].strip():
            extra = set(d) - _DOC_KEYS
            if extra:
                raise APIError(400, f"documents[{i}] has unknown keys {sorted(extra)} (a document "
                               "takes the scope of the token that adds it)", param=f"documents[{i}]")
            _check_fields(d, i)
            continue
        raise APIError(400, f"documents[{i}] must be a non-empty text or an object with a non-empty "
                       "'text'", param=f"documents[{i}]")
    return docs


def _check_fields(doc: dict[str, Any], i: int) -> None:
    # add_documents raises TypeError/ValueError for these, which would reach the client as a 500
    doc_id, metadata = doc.get("id"), doc.get("metadata")
    if doc_id is not None and not (isinstance(doc_id, str) and doc_id):
        raise APIError(400, f"documents[{i}].id must be a non-empty string", param=f"documents[{i}].id")
    if metadata is not None and not (isinstance(metadata, dict)
                                     and all(isinstance(v, str) for v in metadata.values())):
        raise APIError(400, f"documents[{i}].metadata must be an object of string values",
                       param=f"documents[{i}].metadata")


def rag_routes(state: ServerState) -> list[Route]:
    pc = state.pc

    async def documents(request: Request) -> Response:
        scope = state.scope(request)
        docs = parse_documents(await state.body(request))

        def job(queue_s: float) -> Any:
            return pc.add_documents(docs, scope=scope)

        report = await _wait(state, job)
        return JSONResponse({"object": "percache.documents", "scope": scope,
                             "documents": report.documents, "new_chunks": len(report.new_chunks),
                             "duplicate_chunks": report.duplicate_chunks})

    async def ask(request: Request) -> Response:
        arrived = time.perf_counter()
        scope = state.scope(request)
        req = parse_ask(await state.body(request))
        question, sampling = req.question, req.sampling
        check_bias(pc.tokenizer, sampling.logit_bias)
        if len(question) > state.settings.max_question_chars:
            raise APIError(400, f"'question' has {len(question)} characters; at most "
                           f"{state.settings.max_question_chars}", param="question")
        default_max = state.settings.default_max_tokens
        stream = TextStream(pc.tokenizer, None, strip=True)  # as pc.ask strips its answer

        def job(queue_s: float) -> Any:
            return run_ask(pc, question, scope, sampling, default_max, stream, arrived, queue_s)

        return await respond(request, state.runner, "ask", job, stream,
                             Format("answer", state.settings.model_name), streaming=req.stream)

    return [Route("/v1/documents", documents, methods=["POST"]), Route("/v1/ask", ask, methods=["POST"])]


async def _wait(state: ServerState, job: Any) -> Any:
    return await result(state.runner, state.runner.submit("documents", job))
