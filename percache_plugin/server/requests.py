"""Request bodies of ``/v1/chat/completions`` and ``/v1/completions``, checked field by field.

Parsed from the decoded JSON (no web framework needed), so every refusal is an
:class:`~percache_plugin.server.errors.APIError` naming the field (OpenAI's ``param``).
Fields this server does not implement are refused when they would change the answer
(``n`` above 1, ``logprobs``, tools); the rest of OpenAI's optional fields are ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .errors import APIError

__all__ = ["Sampling", "ChatRequest", "CompletionRequest", "parse_chat", "parse_completion",
           "ROLES", "require_object"]

ROLES = ("system", "developer", "user", "assistant")
_MAX_STOPS = 4  # as OpenAI's API


@dataclass(frozen=True)
class Sampling:
    """How to decode: ``temperature == 0`` is greedy decoding (``do_sample=False``)."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def generate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``model.generate`` (``max_new_tokens`` is set by the caller)."""
        if self.temperature == 0:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[dict[str, str], ...]
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: str | tuple[int, ...]
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False


def _bad(param: str, message: str) -> APIError:
    return APIError(400, message, param=param, code="invalid_type" if "must be" in message else None)


def require_object(body: Any) -> dict[str, Any]:
    """The body as a JSON object, or a 400."""
    if not isinstance(body, dict):
        raise APIError(400, f"the request body must be a JSON object, got {_kind(body)}")
    return body


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _int(body: dict[str, Any], name: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"'{name}' must be an integer, got {_kind(value)}")
    if value < lo or (hi is not None and value > hi):
        raise _bad(name, f"'{name}' is {value}; it must be between {lo} and {hi}" if hi is not None
                   else f"'{name}' is {value}; it must be at least {lo}")
    return value


def _float(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(name, f"'{name}' must be a number, got {_kind(value)}")
    if not lo <= value <= hi:
        raise _bad(name, f"'{name}' is {value}; it must be between {lo} and {hi}")
    return float(value)


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(name, f"'{name}' must be a boolean, got {_kind(value)}")
    return value


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise _bad("stop", f"'stop' must be a string or an array of strings, got {_kind(value)}")
    if len(stops) > _MAX_STOPS:
        raise _bad("stop", f"'stop' has {len(stops)} sequences; at most {_MAX_STOPS} are allowed")
    if any(s == "" for s in stops):
        raise _bad("stop", "'stop' sequences must not be empty")
    return tuple(stops)


def _model(body: dict[str, Any]) -> str:
    value = body.get("model")
    if not isinstance(value, str) or not value:
        raise _bad("model", "'model' must be a non-empty string naming a model of GET /v1/models"
                   if value is None or isinstance(value, str) else
                   f"'model' must be a string, got {_kind(value)}")
    return value


def _unsupported(body: dict[str, Any]) -> None:
    n = _int(body, "n", 1)
    if n not in (None, 1):
        raise APIError(400, f"'n' is {n}; this server returns one choice per request (n=1)", param="n")
    for name in ("logprobs", "tools", "functions", "tool_choice", "response_format", "echo",
                 "best_of", "suffix", "logit_bias"):
        value = body.get(name)
        if value is None or value is False or value == [] or value == {} or (name == "best_of" and value == 1):
            continue
        raise APIError(400, f"'{name}' is not supported by this server", param=name)


def _sampling(body: dict[str, Any]) -> Sampling:
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    return Sampling(max_tokens=max_tokens, temperature=_float(body, "temperature", 1.0, 0.0, 2.0),
                    top_p=_float(body, "top_p", 1.0, 0.0, 1.0), stop=_stop(body),
                    seed=_int(body, "seed", -(2**63), 2**63 - 1))


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise _bad("stream_options", f"'stream_options' must be an object, got {_kind(options)}")
    return _bool(options, "include_usage")


def _content(i: int, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: text only
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"messages[{i}].content",
                           f"messages[{i}].content: only text parts ({{'type': 'text', 'text': ...}}) are supported")
            texts.append(part["text"])
        return "".join(texts)
    raise _bad(f"messages[{i}].content", f"messages[{i}].content must be a string, got {_kind(value)}")


def _messages(body: dict[str, Any]) -> tuple[dict[str, str], ...]:
    value = body.get("messages")
    if not isinstance(value, list):
        raise _bad("messages", f"'messages' must be an array of messages, got {_kind(value)}")
    if not value:
        raise APIError(400, "'messages' is empty; send at least one message", param="messages",
                       code="empty_array")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise _bad(f"messages[{i}]", f"messages[{i}] must be an object, got {_kind(m)}")
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"messages[{i}].role", f"messages[{i}].role is {role!r}; expected one of {', '.join(ROLES)}")
        out.append({"role": "system" if role == "developer" else str(role),
                    "content": _content(i, m.get("content"))})
    return tuple(out)


def parse_chat(body: Any) -> ChatRequest:
    """A checked chat request. :raises APIError: 400 naming the field at fault."""
    body = require_object(body)
    _unsupported(body)
    return ChatRequest(model=_model(body), messages=_messages(body), sampling=_sampling(body),
                       stream=_bool(body, "stream"), include_usage=_include_usage(body))


def parse_completion(body: Any) -> CompletionRequest:
    """A checked completion request (``prompt``: a string, one-string array, or token ids)."""
    body = require_object(body)
    _unsupported(body)
    value = body.get("prompt")
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one
    prompt: str | tuple[int, ...]
    if isinstance(value, str) and value:
        prompt = value
    elif isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        prompt = tuple(value)
    elif value in ("", []):
        raise APIError(400, "'prompt' is empty", param="prompt")
    else:
        raise _bad("prompt", f"'prompt' must be a string or an array of token ids (one prompt per "
                   f"request), got {_kind(value)}")
    return CompletionRequest(model=_model(body), prompt=prompt, sampling=_sampling(body),
                             stream=_bool(body, "stream"), include_usage=_include_usage(body))
