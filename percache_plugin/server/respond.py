"""Running a job for an HTTP request: a JSON body when it is done, or server-sent events as
tokens come. A client that disconnects, streaming or not, cancels its job (generation stops
after the current token and the model takes the next request; the runner counts it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .errors import APIError, error_body, shutting_down
from .formats import Format, sse
from .jobs import Outcome
from .runner import Runner
from .stream import TextStream

__all__ = ["respond", "result"]

_DONE = object()


async def respond(request: Request, runner: Runner, kind: str, job: Callable[[float], Outcome],
                  stream: TextStream, fmt: Format, *, streaming: bool,
                  include_usage: bool = False) -> Response:
    """Queue ``job`` (which feeds ``stream``) and answer with its outcome."""
    loop = asyncio.get_running_loop()
    if not streaming:
        future = runner.submit(kind, job, stream.cancel)
        watcher = asyncio.ensure_future(_watch(request, stream))
        try:
            outcome = await result(runner, future)
        except asyncio.CancelledError:
            stream.cancel()
            raise
        finally:
            await _stop(watcher)
        return JSONResponse(fmt.full(outcome))
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone: nobody is listening
            stream.cancel()

    stream.on_text = put
    future = runner.submit(kind, job, stream.cancel)
    future.add_done_callback(lambda _: put(_DONE))
    return StreamingResponse(_events(request, runner, queue, future, stream, fmt, include_usage),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _watch(request: Request, stream: TextStream) -> None:
    """Cancel the job when the client disconnects (the body was read already, so the next
    message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            stream.cancel()
            return


async def result(runner: Runner, future: Future[Any]) -> Any:
    """The job's result once it is done. :raises APIError: 503 ``server_shutting_down`` for a
    job the server's shutdown cancelled while queued or stopped while running."""
    try:
        outcome = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if future.cancelled() and runner.closing:
            raise shutting_down() from None
        raise
    return _checked(runner, outcome)


def _checked(runner: Runner, outcome: Any) -> Any:
    if runner.closing and getattr(outcome, "finish_reason", None) == "cancelled":
        raise shutting_down()  # the shutdown stopped it (a client that left reads nothing)
    return outcome


async def _events(request: Request, runner: Runner, queue: asyncio.Queue[Any], future: Future[Any],
                  stream: TextStream, fmt: Format, include_usage: bool) -> AsyncIterator[str]:
    watcher = asyncio.ensure_future(_watch(request, stream))
    try:
        first = fmt.first()
        if first is not None:
            yield sse(first)
        while (item := await queue.get()) is not _DONE:
            yield sse(fmt.delta(item))
        try:
            if future.cancelled() and runner.closing:
                raise shutting_down()
            outcome = _checked(runner, future.result())
        except APIError as exc:
            yield sse(exc.body())
        except ValueError as exc:  # a refused request, as the app's handler answers it unstreamed
            yield sse(error_body(str(exc), "invalid_request_error"))
        except Exception as exc:  # the response has started: the error goes in the stream
            yield sse(error_body(f"{type(exc).__name__}: {exc}", "server_error"))
        else:
            yield sse(fmt.last(outcome))
            if include_usage:
                yield sse(fmt.usage_chunk(outcome))
        yield sse("[DONE]")
    finally:
        stream.cancel()  # a no-op once generation ended; stops it when the client went away
        await _stop(watcher)


async def _stop(watcher: asyncio.Future[None]) -> None:
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await watcher
