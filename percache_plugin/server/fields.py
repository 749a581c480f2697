"""Every request field the server knows, and what it does with each: one table, not ifs.

A field is ``implemented`` (parsed and honoured exactly, ``requests.py``), ``refused`` (a 400
naming it, unless its value is one that leaves the answer as it is: clients send defaults such
as ``presence_penalty: 0`` or ``tools: []``), or ``ignored`` (it cannot change the answer:
``user``, ``metadata``, ``store``). A field in no row is refused as OpenAI refuses it
("Unrecognized request argument supplied"): a parameter the server does not know is never
silently dropped. The same holds for the keys of a message and the types of a content part.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .errors import APIError

__all__ = ["Handling", "FieldRule", "CHAT", "TEXT", "ASK", "MESSAGE", "FIELDS", "MESSAGE_FIELDS",
           "PART_TYPES", "rule", "check_fields", "shown"]

CHAT, TEXT, ASK, MESSAGE = "chat", "text", "ask", "message"
"""Where a field is given: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/ask``, a message."""


class Handling(str, Enum):
    IMPLEMENTED = "implemented"
    REFUSED = "refused"
    IGNORED = "ignored"


def _absent(value: Any) -> bool:
    return value is None


def _false(value: Any) -> bool:
    return value is None or value is False


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (list, dict, str)) and not value)


def _equal(*defaults: Any) -> Callable[[Any], bool]:
    """None or one of ``defaults`` (a boolean is not a number here: ``True`` is not ``1``)."""
    def same(value: Any, default: Any) -> bool:
        return isinstance(value, bool) == isinstance(default, bool) and value == default

    return lambda value: value is None or any(same(value, d) for d in defaults)


@dataclass(frozen=True)
class FieldRule:
    """One field: where it is given, what the server does with it, and why."""

    name: str
    handling: Handling
    why: str
    routes: frozenset[str] = frozenset({CHAT, TEXT})
    no_op: Callable[[Any], bool] = _absent
    """For a refused field: the values that leave the answer as it is, accepted (and ignored)."""


_I, _R, _G = Handling.IMPLEMENTED, Handling.REFUSED, Handling.IGNORED
_ALL, _OPENAI = frozenset({CHAT, TEXT, ASK}), frozenset({CHAT, TEXT})
_C, _T, _A = frozenset({CHAT}), frozenset({TEXT}), frozenset({ASK})
_SAMPLED = "applied when sampling (temperature > 0); greedy decoding keeps the top token anyway"
_NO_TOOLS = "the server runs no tools or functions"

FIELDS: tuple[FieldRule, ...] = (
    # OpenAI's chat/completions and completions bodies
    FieldRule("model", _I, "the served model (GET /v1/models); another name is a 404", _OPENAI),
    FieldRule("messages", _I, "rendered with the model's chat template", _C),
    FieldRule("prompt", _I, "a string, a one-string array or token ids", _T),
    FieldRule("max_tokens", _I, "at least 1, capped by the context left", _ALL),
    FieldRule("max_completion_tokens", _I, "max_tokens under its newer name (it counts when both "
                                           "are given)", _ALL),
    FieldRule("temperature", _I, "0 is greedy decoding; 1e-30 and above sample (smaller "
                                 "values overflow the sampler: refused)", _ALL),
    FieldRule("top_p", _I, "nucleus sampling; 0 keeps the top token", _ALL),
    FieldRule("stop", _I, "up to 4 non-empty sequences; the text is cut before the first", _OPENAI),
    FieldRule("seed", _I, "seeds this request's sampling alone (Engine.generate(seed=...))", _ALL),
    FieldRule("stream", _I, "server-sent events", _ALL),
    FieldRule("stream_options", _I, "include_usage: a last chunk with usage "
                                    "(include_obfuscation is ignored: no padding is sent); "
                                    "only with stream: true, as OpenAI's API", _OPENAI),
    FieldRule("presence_penalty", _I, "OpenAI's formula on the logits, per generated token", _ALL),
    FieldRule("frequency_penalty", _I, "OpenAI's formula on the logits, per generated token", _ALL),
    FieldRule("logit_bias", _I, "added to the logits before sampling; token ids of the model's "
                                "tokenizer, biases from -100 to 100", _ALL),
    FieldRule("prediction", _I, "predicted output ({'type': 'content', 'content': text or text "
                                "parts}): greedy decoding drafts from it, verified, so the answer "
                                "is the same; usage.completion_tokens_details counts its accepted "
                                "and rejected tokens (sampling does not use it)", _C),
    FieldRule("n", _R, "one choice per request (n=1)", _OPENAI, _equal(1)),
    FieldRule("logprobs", _R, "no log probabilities are returned", _OPENAI, _false),
    FieldRule("top_logprobs", _R, "no log probabilities are returned", _C, _equal(0)),
    FieldRule("tools", _R, _NO_TOOLS, _C, _empty),
    FieldRule("functions", _R, _NO_TOOLS, _C, _empty),
    FieldRule("tool_choice", _R, f"{_NO_TOOLS} ('none' and 'auto' answer in text and are "
                                 "accepted)", _C, _equal("none", "auto")),
    FieldRule("function_call", _R, f"{_NO_TOOLS} ('none' and 'auto' are accepted)", _C,
              _equal("none", "auto")),
    FieldRule("response_format", _R, "no JSON mode or schema ({'type': 'text'} is accepted)", _C,
              _equal({"type": "text"})),
    FieldRule("audio", _R, "the model answers in text only", _C),
    FieldRule("modalities", _R, "the model answers in text only (['text'] is accepted)", _C,
              _equal(["text"])),
    FieldRule("reasoning_effort", _R, "the model has no reasoning setting", _C),
    FieldRule("verbosity", _R, "the model has no verbosity setting ('medium', the default, "
                               "is accepted)", _C, _equal("medium")),
    FieldRule("web_search_options", _R, "the server does not search the web", _C),
    FieldRule("echo", _R, "the prompt is not echoed", _T, _false),
    FieldRule("best_of", _R, "one candidate per request (best_of=1)", _T, _equal(1)),
    FieldRule("suffix", _R, "no insertion after a suffix", _T, _empty),
    FieldRule("parallel_tool_calls", _G, "tools are refused, so it has nothing to act on", _C),
    FieldRule("user", _G, "an end-user id for abuse monitoring", _OPENAI),
    FieldRule("safety_identifier", _G, "an end-user id for abuse monitoring", _C),
    FieldRule("metadata", _G, "tags for stored completions; nothing is stored", _C),
    FieldRule("store", _G, "whether OpenAI keeps the completion; nothing is kept", _C),
    FieldRule("service_tier", _G, "a billing and latency tier; there is one", _C),
    FieldRule("prompt_cache_key", _G, "a caching hint; percache keys its cache by content", _C),
    # extensions common clients send (vLLM, llama.cpp, transformers names)
    FieldRule("top_k", _I, f"keep the k most likely tokens (0 or -1: off); {_SAMPLED}", _ALL),
    FieldRule("min_p", _I, f"drop tokens below min_p x the top probability; {_SAMPLED}", _ALL),
    FieldRule("repetition_penalty", _I, "transformers' (and vLLM's) multiplicative penalty over "
                                        "prompt and generated tokens; 1 is off", _ALL),
    FieldRule("typical_p", _R, "no typical sampling (1 is accepted)", _OPENAI, _equal(1)),
    FieldRule("repeat_penalty", _R, "llama.cpp's penalty over a window of recent tokens is not "
                                    "repetition_penalty's; 1 is accepted", _OPENAI, _equal(1)),
    FieldRule("min_tokens", _R, "end of text is never suppressed (0 is accepted)", _OPENAI, _equal(0)),
    FieldRule("ignore_eos", _R, "generation ends at the end-of-text token", _OPENAI, _false),
    FieldRule("stop_token_ids", _R, "stop sequences are strings ('stop')", _OPENAI, _empty),
    FieldRule("skip_special_tokens", _R, "special tokens are left out of the text (true is "
                                         "accepted)", _OPENAI, _equal(True)),
    FieldRule("include_stop_str_in_output", _R, "the text is cut before a stop sequence", _OPENAI,
              _false),
    FieldRule("add_generation_prompt", _R, "the template's assistant header is always added (true "
                                           "is accepted)", _C, _equal(True)),
    FieldRule("continue_final_message", _R, "a new assistant message is always started", _C, _false),
    FieldRule("chat_template", _R, "the model's own chat template is used", _C),
    FieldRule("chat_template_kwargs", _R, "the model's own chat template is used", _C, _empty),
    FieldRule("guided_json", _R, "no constrained decoding", _OPENAI),
    FieldRule("guided_regex", _R, "no constrained decoding", _OPENAI),
    FieldRule("guided_choice", _R, "no constrained decoding", _OPENAI),
    FieldRule("guided_grammar", _R, "no constrained decoding", _OPENAI),
    FieldRule("grammar", _R, "no constrained decoding", _OPENAI),
    FieldRule("json_schema", _R, "no constrained decoding", _OPENAI),
    FieldRule("cache_prompt", _G, "llama.cpp's prompt cache switch: percache's reuse is exact", _OPENAI),
    # percache's own route
    FieldRule("question", _I, "answered by pc.ask (retrieval and the QA bank)", _A),
)

MESSAGE_FIELDS: tuple[FieldRule, ...] = (
    FieldRule("role", _I, "system, developer (as system), user, assistant", frozenset({MESSAGE})),
    FieldRule("content", _I, "a string, or text parts joined with no separator",
              frozenset({MESSAGE})),
    FieldRule("name", _R, "the chat template has no place for a participant's name", frozenset({MESSAGE}),
              _empty),
    FieldRule("tool_calls", _R, _NO_TOOLS, frozenset({MESSAGE}), _empty),
    FieldRule("function_call", _R, _NO_TOOLS, frozenset({MESSAGE})),
    FieldRule("tool_call_id", _R, _NO_TOOLS, frozenset({MESSAGE})),
    FieldRule("refusal", _R, "the chat template has no place for a refusal", frozenset({MESSAGE})),
    FieldRule("audio", _R, "the model reads text only", frozenset({MESSAGE})),
)

PART_TYPES: Mapping[str, tuple[Handling, str]] = {
    "text": (_I, "joined with the message's other text parts, no separator"),
    "image_url": (_R, "the model reads text only"),
    "input_audio": (_R, "the model reads text only"),
    "file": (_R, "the model reads text only"),
    "refusal": (_R, "the chat template has no place for a refusal"),
}
"""What each content part ``type`` of a message does."""

_RULES: Mapping[tuple[str, str], FieldRule] = {
    (route, r.name): r for r in (*FIELDS, *MESSAGE_FIELDS) for route in r.routes}


def rule(route: str, name: str) -> FieldRule | None:
    """The row of field ``name`` on ``route`` (:data:`CHAT`, :data:`TEXT`, :data:`ASK`,
    :data:`MESSAGE`), or None: an unknown field."""
    return _RULES.get((route, name))


def shown(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters (for an error message)."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_fields(body: Mapping[str, Any], route: str, where: str = "") -> None:
    """Refuse every field of ``body`` that ``route`` does not know, and every refused field
    whose value would change the answer. ``where``: the prefix of ``param`` (``messages[0].``).

    :raises APIError: 400 whose ``param`` names the field."""
    for name, value in body.items():
        found = rule(route, name)
        param = f"{where}{name}"
        if found is None:
            raise APIError(400, f"Unrecognized request argument supplied: {param}", param=param,
                           code="unknown_parameter")
        if found.handling is Handling.REFUSED and not found.no_op(value):
            raise APIError(400, f"'{param}' = {shown(value)} is not supported by this server: "
                           f"{found.why}", param=param, code="unsupported_parameter")
