"""Request bodies of ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/ask``, checked
field by field.

Parsed from the decoded JSON (no web framework needed), so every refusal is an
:class:`~percache_plugin.server.errors.APIError` naming the field (OpenAI's ``param``). What
the server does with each field is one table, ``fields.FIELDS``: a field is implemented
exactly, refused when its value would change the answer (a value that leaves the answer as it
is, such as ``presence_penalty: 0`` or ``tools: []``, is accepted), or ignored because it cannot
change the answer (``user``, ``metadata``); a field in no row is refused. Nothing that would
change the answer is silently dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .checks import bad, kind_of, range_error, require_object, required
from .errors import APIError
from .fields import ASK, CHAT, TEXT, check_fields, shown
from .messages import parse_messages, parse_prediction
from .penalties import LogitBias, OpenAIPenalties

__all__ = ["Sampling", "ChatRequest", "CompletionRequest", "AskRequest", "parse_chat",
           "parse_completion", "parse_ask", "MIN_TEMPERATURE"]

_MAX_STOPS = 4  # as OpenAI's API
MIN_TEMPERATURE = 1e-30
"""The smallest temperature above 0 that is sampled: transformers divides the float32 logits by
it, and below about 1e-36 they overflow to infinities (a 500). 0 is greedy decoding."""


@dataclass(frozen=True)
class Sampling:
    """How to decode: ``temperature == 0`` is greedy decoding (``do_sample=False``).

    The request fixes every sampling setting: ``top_k`` 0 and ``min_p`` 0 (off, as in OpenAI's
    API) are passed too, so the model's ``generation_config`` (transformers' default ``top_k``
    is 50) does not narrow a request that did not ask for it."""

    max_tokens: int | None = None
    max_tokens_field: str = field(default="max_tokens", compare=False)
    """The field ``max_tokens`` came from (``max_completion_tokens`` too): a refusal names it."""
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    """``(token id, bias)`` pairs, the non-zero biases only."""

    def generate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``Engine.generate`` (``max_new_tokens`` is set by the caller).
        A penalty or bias is passed only when it is on: ``pc.ask`` keeps using the QA bank
        without one (``assistant/exact_kwargs.py``), and refuses it to a request with one.
        ``seed`` seeds this request's sampling alone (``decode/seeded.py``)."""
        kwargs: dict[str, Any] = {"do_sample": False}
        if self.temperature != 0:
            kwargs = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p,
                      "top_k": self.top_k, "min_p": self.min_p}
        if self.repetition_penalty != 1:
            kwargs["repetition_penalty"] = self.repetition_penalty
        processors: list[Any] = [LogitBias(self.logit_bias)] if self.logit_bias else []
        if self.presence_penalty or self.frequency_penalty:
            processors.append(OpenAIPenalties(self.presence_penalty, self.frequency_penalty))
        if processors:
            kwargs["logits_processor"] = processors
        if self.seed is not None:
            kwargs["seed"] = self.seed
        return kwargs


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[dict[str, str], ...]
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False
    prediction: str | None = None
    """The predicted output's text (``prediction.content``, text parts joined), or None."""


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: str | tuple[int, ...]
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False


@dataclass(frozen=True)
class AskRequest:
    question: str
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.0))
    stream: bool = False


def _int(body: dict[str, Any], name: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, f"'{name}' must be an integer, got {kind_of(value)}")
    if value < lo or (hi is not None and value > hi):
        raise range_error(name, value, "integer", value < lo,
                           f"between {lo} and {hi}" if hi is not None else f"at least {lo}")
    return value


def _float(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(name, f"'{name}' must be a number, got {kind_of(value)}")
    if not lo <= value <= hi:
        raise range_error(name, value, "decimal", value < lo, f"between {lo} and {hi}")
    return float(value)


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad(name, f"'{name}' must be a boolean, got {kind_of(value)}")
    return value


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("stop", f"'stop' must be a string or an array of strings, got {kind_of(value)}")
    if len(stops) > _MAX_STOPS:
        raise bad("stop", f"'stop' has {len(stops)} sequences, out of range: at most {_MAX_STOPS} "
                   "are allowed", "array_above_max_length")
    if any(s == "" for s in stops):
        raise bad("stop", "'stop' sequences must not be empty", "invalid_value")
    return tuple(stops)


def _logit_bias(body: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    value = body.get("logit_bias")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise bad("logit_bias", f"'logit_bias' must be an object of token ids to biases, got {kind_of(value)}")
    out = []
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise bad("logit_bias", f"'logit_bias' keys must be token ids, got {key!r}", "invalid_value")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias):
            raise bad("logit_bias", f"'logit_bias' values must be numbers, got {shown(bias)}")
        if not -100 <= bias <= 100:
            raise range_error("logit_bias", bias, "decimal", bias < -100, "between -100 and 100",
                               f"'logit_bias' of token {key}")
        if bias:
            out.append((int(key), float(bias)))
    return tuple(sorted(out))


def _model(body: dict[str, Any]) -> str:
    value = required(body, "model")
    if not isinstance(value, str):
        raise bad("model", f"'model' must be a string, got {kind_of(value)}")
    if not value:
        raise bad("model", "'model' must name a model of GET /v1/models, got ''", "invalid_value")
    return value


def _temperature(body: dict[str, Any], default: float) -> float:
    value = _float(body, "temperature", default, 0.0, 2.0)
    if 0 < value < MIN_TEMPERATURE:  # smaller values overflow the sampler
        raise range_error("temperature", value, "decimal", True,
                           f"0 (greedy decoding) or between {MIN_TEMPERATURE} and 2.0")
    return value


def _sampling(body: dict[str, Any], temperature: float = 1.0, stops: bool = True) -> Sampling:
    # both are checked; the newer name counts when both are given (as vLLM does)
    newer, older = _int(body, "max_completion_tokens", 1), _int(body, "max_tokens", 1)
    max_tokens = older if newer is None else newer
    repetition = _float(body, "repetition_penalty", 1.0, 0.0, 100.0)
    if repetition == 0:
        raise range_error("repetition_penalty", value=0.0, kind="decimal", below=True,
                           allowed="above 0 and at most 100.0 (1 is off)")
    top_k = _int(body, "top_k", -1)
    return Sampling(max_tokens=max_tokens, max_tokens_field="max_tokens" if newer is None else "max_completion_tokens",
                    temperature=_temperature(body, temperature),
                    top_p=_float(body, "top_p", 1.0, 0.0, 1.0), stop=_stop(body) if stops else (),
                    seed=_int(body, "seed", -(2**63), 2**63 - 1),
                    top_k=max(top_k or 0, 0), min_p=_float(body, "min_p", 0.0, 0.0, 1.0),
                    presence_penalty=_float(body, "presence_penalty", 0.0, -2.0, 2.0),
                    frequency_penalty=_float(body, "frequency_penalty", 0.0, -2.0, 2.0),
                    repetition_penalty=repetition, logit_bias=_logit_bias(body))


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise bad("stream_options", f"'stream_options' must be an object, got {kind_of(options)}")
    unknown = sorted(set(options) - {"include_usage", "include_obfuscation"})
    if unknown:
        raise APIError(400, f"Unrecognized request argument supplied: stream_options.{unknown[0]}",
                       param=f"stream_options.{unknown[0]}", code="unknown_parameter")
    include = _bool(options, "include_usage")
    if not _bool(body, "stream"):  # as OpenAI's API (and vLLM) refuse it
        raise APIError(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                       param="stream_options")
    return include


def parse_chat(body: Any) -> ChatRequest:
    """A checked chat request. :raises APIError: 400 naming the field at fault."""
    body = require_object(body)
    check_fields(body, CHAT)
    return ChatRequest(model=_model(body), messages=parse_messages(body), sampling=_sampling(body),
                       stream=_bool(body, "stream"), include_usage=_include_usage(body),
                       prediction=parse_prediction(body))


def parse_completion(body: Any) -> CompletionRequest:
    """A checked completion request (``prompt``: a string, one-string array, or token ids)."""
    body = require_object(body)
    check_fields(body, TEXT)
    value = required(body, "prompt")
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
        raise bad("prompt", f"'prompt' must be a string or an array of token ids (one prompt per "
                   f"request), got {kind_of(value)}")
    return CompletionRequest(model=_model(body), prompt=prompt, sampling=_sampling(body),
                             stream=_bool(body, "stream"), include_usage=_include_usage(body))


def parse_ask(body: Any) -> AskRequest:
    """A checked ``/v1/ask`` request: ``question``, ``max_tokens``, ``stream`` and the sampling
    fields (greedy unless ``temperature`` is given)."""
    body = require_object(body)
    check_fields(body, ASK)
    question = required(body, "question")
    if not isinstance(question, str) or not question.strip():
        raise APIError(400, "'question' must be a non-empty string", param="question")
    return AskRequest(question, _sampling(body, temperature=0.0, stops=False),
                      _bool(body, "stream"))
