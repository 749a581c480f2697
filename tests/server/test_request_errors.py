"""Refusals of request fields carry OpenAI's error codes: ``invalid_type`` only for a value of
the wrong JSON type; a value out of range gets OpenAI's range code and a message naming the
field and the range allowed."""

from __future__ import annotations

from typing import Any

import pytest

from percache_plugin.server.errors import APIError
from percache_plugin.server.requests import parse_ask, parse_chat, parse_completion

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _refusal(extra: dict[str, Any]) -> APIError:
    with pytest.raises(APIError) as info:
        parse_chat({**CHAT, **extra})
    return info.value


@pytest.mark.parametrize(("extra", "param", "code", "allowed"), [
    ({"temperature": 3}, "temperature", "decimal_above_max_value", "between 0.0 and 2.0"),
    ({"temperature": -0.5}, "temperature", "decimal_below_min_value", "between 0.0 and 2.0"),
    ({"temperature": 1e-40}, "temperature", "decimal_below_min_value", "between 1e-30 and 2.0"),
    ({"top_p": 1.5}, "top_p", "decimal_above_max_value", "between 0.0 and 1.0"),
    ({"presence_penalty": -3}, "presence_penalty", "decimal_below_min_value", "between -2.0 and 2.0"),
    ({"repetition_penalty": 0}, "repetition_penalty", "decimal_below_min_value", "above 0"),
    ({"max_tokens": 0}, "max_tokens", "integer_below_min_value", "at least 1"),
    ({"max_completion_tokens": -4}, "max_completion_tokens", "integer_below_min_value", "at least 1"),
    ({"seed": 2**64}, "seed", "integer_above_max_value", str(2**63 - 1)),
    ({"logit_bias": {"5": 200}}, "logit_bias", "decimal_above_max_value", "between -100 and 100"),
    ({"logit_bias": {"5": -101}}, "logit_bias", "decimal_below_min_value", "between -100 and 100"),
    ({"stop": ["a"] * 5}, "stop", "array_above_max_length", "at most 4"),
])
def test_out_of_range_values_get_a_range_code_naming_field_and_range(
        extra: dict[str, Any], param: str, code: str, allowed: str) -> None:
    err = _refusal(extra)
    assert err.status == 400 and err.type == "invalid_request_error"
    assert err.param == param and err.code == code
    assert "out of range" in err.message and param in err.message and allowed in err.message


@pytest.mark.parametrize(("extra", "param", "code"), [
    ({"temperature": "hot"}, "temperature", "invalid_type"),
    ({"max_tokens": 1.5}, "max_tokens", "invalid_type"),
    ({"logit_bias": {"5": "x"}}, "logit_bias", "invalid_type"),
    ({"logit_bias": {"five": 1}}, "logit_bias", "invalid_value"),
    ({"stop": [""]}, "stop", "invalid_value"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "invalid_value"),
])
def test_wrong_types_and_meaningless_values_keep_their_codes(extra: dict[str, Any], param: str,
                                                             code: str) -> None:
    err = _refusal(extra)
    assert err.param == param and err.code == code and "out of range" not in err.message


def test_other_routes_share_the_range_codes() -> None:
    with pytest.raises(APIError) as info:
        parse_completion({"model": "m", "prompt": "x", "top_p": 2})
    assert info.value.code == "decimal_above_max_value"
    with pytest.raises(APIError) as info:
        parse_ask({"question": "q", "max_tokens": 0})
    assert info.value.code == "integer_below_min_value"


@pytest.mark.parametrize(("parse", "body", "param"), [
    (parse_chat, {"messages": CHAT["messages"]}, "model"),
    (parse_chat, {"model": None, "messages": CHAT["messages"]}, "model"),
    (parse_completion, {"prompt": "x"}, "model"),
    (parse_chat, {"model": "m"}, "messages"),
    (parse_completion, {"model": "m"}, "prompt"),
    (parse_ask, {}, "question"),
])
def test_a_missing_required_field_is_named_as_missing(parse: Any, body: dict[str, Any], param: str) -> None:
    """OpenAI's shape for a required field left out: ``missing_required_parameter`` naming it
    (a request without ``model`` was coded ``invalid_type``)."""
    with pytest.raises(APIError) as info:
        parse(body)
    err = info.value
    assert err.status == 400 and err.type == "invalid_request_error"
    assert err.param == param and err.code == "missing_required_parameter"
    assert f"Missing required parameter: '{param}'" in err.message


@pytest.mark.parametrize(("body", "code"), [({"model": ""}, "invalid_value"), ({"model": 3}, "invalid_type")])
def test_a_model_given_but_unusable_keeps_its_code(body: dict[str, Any], code: str) -> None:
    err = _refusal(body)
    assert err.param == "model" and err.code == code


def test_max_tokens_is_checked_beside_max_completion_tokens() -> None:
    """Both given: max_completion_tokens counts, and max_tokens is checked too (it was not read)."""
    assert _refusal({"max_completion_tokens": 5, "max_tokens": "x"}).param == "max_tokens"
    assert _refusal({"max_completion_tokens": 5, "max_tokens": 0}).code == "integer_below_min_value"
    got = parse_chat({**CHAT, "max_completion_tokens": 5, "max_tokens": 7}).sampling
    assert got.max_tokens == 5 and got.max_tokens_field == "max_completion_tokens"
    assert parse_chat({**CHAT, "max_tokens": 7}).sampling.max_tokens_field == "max_tokens"


def test_stream_options_need_stream_as_openai_says() -> None:
    err = _refusal({"stream_options": {"include_usage": True}})
    assert err.param == "stream_options" and "only allowed when 'stream' is enabled" in err.message
    assert _refusal({"stream": False, "stream_options": {"include_usage": False}}).param == "stream_options"
    assert parse_chat({**CHAT, "stream": True, "stream_options": {"include_usage": True}}).include_usage
    assert not parse_chat({**CHAT, "stream_options": None}).include_usage


@pytest.mark.parametrize(("message", "param"), [({"role": "user"}, "messages[0].content"),
                                                ({"role": "user", "content": None}, "messages[0].content"),
                                                ({"content": "hi"}, "messages[0].role")])
def test_a_message_without_role_or_content_names_the_missing_key(message: dict[str, Any], param: str) -> None:
    """As OpenAI's API: "Missing required parameter: 'messages[0].content'" (they were
    ``invalid_type`` and ``invalid_value``)."""
    err = _refusal({"messages": [message]})
    assert err.param == param and err.code == "missing_required_parameter" and param in err.message
