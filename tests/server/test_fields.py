"""The field table (``server/fields.py``) decides for every field of OpenAI's request bodies and
the common extensions; the parser reads exactly the implemented ones; a refused field is a 400
naming it unless its value is a no-op; an ignored one leaves the request as it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from percache_plugin.server.errors import APIError
from percache_plugin.server.fields import (
    ASK,
    CHAT,
    FIELDS,
    MESSAGE,
    MESSAGE_FIELDS,
    PART_TYPES,
    TEXT,
    Handling,
    rule,
)
from percache_plugin.server.penalties import LogitBias, OpenAIPenalties
from percache_plugin.server.requests import Sampling, parse_ask, parse_chat, parse_completion

# OpenAI's API reference: the create-chat-completion and create-completion request bodies
OPENAI_CHAT = ("messages", "model", "audio", "frequency_penalty", "function_call", "functions",
               "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
               "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty",
               "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier",
               "seed", "service_tier", "stop", "store", "stream", "stream_options", "temperature",
               "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
               "web_search_options")
OPENAI_TEXT = ("model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
               "max_tokens", "n", "presence_penalty", "seed", "stop", "stream", "stream_options",
               "suffix", "temperature", "top_p", "user")
OPENAI_MESSAGE = ("role", "content", "name", "tool_calls", "function_call", "tool_call_id",
                  "refusal", "audio")
EXTENSIONS = ("top_k", "min_p", "repetition_penalty")

MESSAGES = [{"role": "user", "content": "hi"}]
BASE = {CHAT: {"model": "tiny", "messages": MESSAGES}, TEXT: {"model": "tiny", "prompt": "hi"},
        ASK: {"question": "hi"}}
PARSE: dict[str, Callable[[Any], Any]] = {CHAT: parse_chat, TEXT: parse_completion, ASK: parse_ask}

# a value of each refused field that would change the answer, and one that would not
CHANGING: dict[str, Any] = {
    "n": 2, "logprobs": True, "top_logprobs": 3, "tools": [{"type": "function"}],
    "functions": [{"name": "f"}], "tool_choice": "required", "function_call": {"name": "f"},
    "response_format": {"type": "json_object"}, "audio": {"voice": "alloy"}, "modalities": ["text", "audio"],
    "reasoning_effort": "low", "verbosity": "low", "web_search_options": {}, "echo": True, "best_of": 2,
    "suffix": "end", "typical_p": 0.9, "repeat_penalty": 1.1, "min_tokens": 3, "ignore_eos": True,
    "stop_token_ids": [2], "skip_special_tokens": False, "include_stop_str_in_output": True,
    "add_generation_prompt": False, "continue_final_message": True, "chat_template": "{{ x }}",
    "chat_template_kwargs": {"enable_thinking": True}, "guided_json": {}, "guided_regex": "a+",
    "guided_choice": ["a"], "guided_grammar": "root ::= 'a'", "grammar": "root ::= 'a'", "json_schema": {},
}
NO_OP: dict[str, Any] = {
    "n": 1, "logprobs": False, "top_logprobs": 0, "tools": [], "functions": [],
    "tool_choice": "none", "function_call": "auto", "response_format": {"type": "text"}, "audio": None,
    "modalities": ["text"], "reasoning_effort": None, "verbosity": "medium", "web_search_options": None,
    "echo": False, "best_of": 1, "suffix": "", "typical_p": 1.0, "repeat_penalty": 1, "min_tokens": 0,
    "ignore_eos": False, "stop_token_ids": [], "skip_special_tokens": True,
    "include_stop_str_in_output": False, "add_generation_prompt": True, "continue_final_message": False,
    "chat_template": None, "chat_template_kwargs": {}, "guided_json": None, "guided_regex": None,
    "guided_choice": None, "guided_grammar": None, "grammar": None, "json_schema": None,
}
IGNORED = {"user": "u-1", "metadata": {"k": "v"}, "store": True, "service_tier": "flex",
           "safety_identifier": "s", "prompt_cache_key": "k", "parallel_tool_calls": False,
           "cache_prompt": False}


def _rules(route: str, handling: Handling) -> list[str]:
    return [r.name for r in FIELDS if route in r.routes and r.handling is handling]


def _refusal(route: str, body: dict[str, Any]) -> APIError:
    with pytest.raises(APIError) as info:
        PARSE[route]({**BASE[route], **body})
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(("route", "names"), [(CHAT, OPENAI_CHAT + EXTENSIONS), (TEXT, OPENAI_TEXT + EXTENSIONS),
                                              (MESSAGE, OPENAI_MESSAGE)])
def test_every_openai_field_and_extension_has_a_decision(route: str, names: tuple[str, ...]) -> None:
    missing = [n for n in names if rule(route, n) is None]
    assert not missing, f"fields with no row in server/fields.py: {missing}"
    assert all(r.why for r in (*FIELDS, *MESSAGE_FIELDS))


class _Reads(dict):  # type: ignore[type-arg]
    """A body that records which fields the parser reads."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


@pytest.mark.parametrize("route", [CHAT, TEXT, ASK])
def test_the_parser_reads_exactly_the_implemented_fields(route: str) -> None:
    """A field read by the parser with no row (or a row saying "implemented" for a field
    nobody reads) fails here."""
    body = _Reads(BASE[route])
    PARSE[route](body)
    implemented = set(_rules(route, Handling.IMPLEMENTED))
    assert body.read == implemented
    message = _Reads(MESSAGES[0])
    parse_chat({**BASE[CHAT], "messages": [message]})
    assert message.read == {r.name for r in MESSAGE_FIELDS if r.handling is Handling.IMPLEMENTED}


def test_the_test_values_cover_every_refused_and_ignored_field() -> None:
    refused = {r.name for r in FIELDS if r.handling is Handling.REFUSED}
    assert set(CHANGING) == refused and set(NO_OP) == refused
    assert set(IGNORED) == {r.name for r in FIELDS if r.handling is Handling.IGNORED}


@pytest.mark.parametrize("name", sorted(CHANGING))
def test_a_refused_field_is_a_400_naming_it_unless_its_value_is_a_no_op(name: str) -> None:
    for route in (r for r in (CHAT, TEXT) if rule(r, name) is not None):
        err = _refusal(route, {name: CHANGING[name]})
        assert err.param == name and err.code == "unsupported_parameter" and name in err.message
        assert PARSE[route]({**BASE[route], name: NO_OP[name]}).sampling == Sampling()


@pytest.mark.parametrize("name", sorted(IGNORED))
def test_an_ignored_field_is_accepted_and_changes_nothing(name: str) -> None:
    for route in (r for r in (CHAT, TEXT) if rule(r, name) is not None):
        assert PARSE[route]({**BASE[route], name: IGNORED[name]}) == PARSE[route](BASE[route])


@pytest.mark.parametrize("route", [CHAT, TEXT, ASK])
def test_an_unknown_field_is_refused_naming_it(route: str) -> None:
    err = _refusal(route, {"frobnicate": 1})
    assert err.param == "frobnicate" and err.code == "unknown_parameter"
    assert _refusal(route, {"question" if route != ASK else "messages": "x"}).code == "unknown_parameter"


def test_implemented_sampling_fields_are_parsed() -> None:
    got = parse_chat({**BASE[CHAT], "temperature": 0.7, "top_p": 0, "top_k": -1, "min_p": 0.05,
                      "presence_penalty": -0.5, "frequency_penalty": 1.5, "repetition_penalty": 1.2,
                      "logit_bias": {"9": -100, "7": 5.5, "3": 0}})
    assert got.sampling == Sampling(temperature=0.7, top_p=0.0, top_k=0, min_p=0.05, presence_penalty=-0.5,
                                    frequency_penalty=1.5, repetition_penalty=1.2,
                                    logit_bias=((7, 5.5), (9, -100.0)))
    assert parse_chat({**BASE[CHAT], "temperature": 1e-30}).sampling.temperature == 1e-30
    assert parse_ask({"question": "q"}).sampling.temperature == 0.0  # /v1/ask is greedy by default


@pytest.mark.parametrize(("body", "param"), [
    ({"temperature": 1e-40}, "temperature"), ({"max_tokens": 0}, "max_tokens"),
    ({"presence_penalty": 2.5}, "presence_penalty"), ({"frequency_penalty": "high"}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"), ({"top_k": -2}, "top_k"), ({"min_p": 1.5}, "min_p"),
    ({"stop": ""}, "stop"), ({"logit_bias": {"a": 1}}, "logit_bias"), ({"logit_bias": {"1": 101}}, "logit_bias"),
    ({"logit_bias": [1]}, "logit_bias"), ({"stream_options": {"include_usage": True, "chunk": 1}}, "stream_options.chunk"),
])
def test_bad_values_of_implemented_fields_are_refused(body: dict[str, Any], param: str) -> None:
    assert _refusal(CHAT, body).param == param


def test_sampling_fixes_top_k_and_min_p_and_passes_penalties_only_when_on() -> None:
    """transformers' default top_k=50 (or a generation_config's) no longer narrows a sampled
    request that did not ask for it."""
    sampled = Sampling(temperature=0.8).generate_kwargs()
    assert sampled == {"do_sample": True, "temperature": 0.8, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    assert Sampling(temperature=0, presence_penalty=0.0).generate_kwargs() == {"do_sample": False}
    on = Sampling(temperature=0, frequency_penalty=1.5, repetition_penalty=1.3,
                  logit_bias=((7, 5.0),)).generate_kwargs()
    assert on["repetition_penalty"] == 1.3
    bias, penalty = on["logits_processor"]
    assert isinstance(penalty, OpenAIPenalties) and penalty.frequency_penalty == 1.5
    assert isinstance(bias, LogitBias) and bias.ids == [7] and bias.values == [5.0]


def test_text_parts_are_joined_and_other_parts_refused() -> None:
    parts = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]
    got = parse_chat({**BASE[CHAT], "messages": [{"role": "developer", "content": "Be brief."},
                                                 {"role": "user", "content": parts, "name": ""}]})
    assert got.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, world"})
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    err = _refusal(CHAT, {"messages": [{"role": "user", "content": [parts[0], image]}]})
    assert err.param == "messages[0].content[1]" and err.code == "unsupported_content" and "image_url" in err.message
    assert _refusal(CHAT, {"messages": [{"role": "user", "content": [{"type": "video"}]}]}).param == \
        "messages[0].content[0]"


@pytest.mark.parametrize(("message", "param"), [
    ({"role": "user", "content": "hi", "name": "ana"}, "messages[0].name"),
    ({"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}, "messages[0].tool_calls"),
    ({"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}}, "messages[0].cache_control"),
])
def test_message_fields_that_would_change_the_prompt_are_refused(message: dict[str, Any], param: str) -> None:
    assert _refusal(CHAT, {"messages": [message]}).param == param


def test_docs_list_every_field() -> None:
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "server.md").read_text()
    section = docs[docs.index("## Request fields"):docs.index("## Errors")]
    missing = [r.name for r in (*FIELDS, *MESSAGE_FIELDS) if f"`{r.name}`" not in section]
    assert not missing, f"docs/server.md 'Request fields' does not mention {missing}"
    assert all(f"`{kind}`" in section for kind in PART_TYPES)


def test_prediction_is_parsed_from_a_string_or_text_parts() -> None:
    def predicted(content: Any) -> str | None:
        return parse_chat({**BASE[CHAT], "prediction": {"type": "content", "content": content}}).prediction

    assert predicted("Dear Ana,\nthe rehearsal") == "Dear Ana,\nthe rehearsal"
    assert predicted([{"type": "text", "text": "Dear "}, {"type": "text", "text": "Ana"}]) == "Dear Ana"
    assert predicted("") is None and predicted([]) is None
    assert parse_chat(BASE[CHAT]).prediction is None
    assert parse_chat({**BASE[CHAT], "prediction": None}).prediction is None


@pytest.mark.parametrize("value", [
    "Dear Ana", {"content": "x"}, {"type": "text", "content": "x"}, {"type": "content"},
    {"type": "content", "content": 5}, {"type": "content", "content": ["x"]},
    {"type": "content", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
    {"type": "content", "content": [{"type": "text", "text": 3}]},
    {"type": "content", "content": "x", "extra": 1},
])
def test_bad_prediction_shapes_are_a_400_naming_prediction(value: Any) -> None:
    err = _refusal(CHAT, {"prediction": value})
    assert err.param == "prediction" and "prediction" in err.message


def test_prediction_is_refused_on_completions() -> None:
    """OpenAI's completions endpoint has no predicted outputs: an unknown field there."""
    err = _refusal(TEXT, {"prediction": {"type": "content", "content": "x"}})
    assert err.param == "prediction" and err.code == "unknown_parameter"
