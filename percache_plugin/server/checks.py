"""The checks every request parser shares: OpenAI-coded refusals naming the field."""

from __future__ import annotations

from typing import Any

from .errors import APIError

__all__ = ["bad", "range_error", "require_object", "kind_of", "required"]


def bad(param: str, message: str, code: str = "invalid_type") -> APIError:
    """A 400 naming ``param``, with OpenAI's ``code``: ``invalid_type`` (wrong JSON type),
    ``invalid_value`` (right type, no meaning) or one of :func:`range_error`'s."""
    return APIError(400, message, param=param, code=code)


def range_error(param: str, value: object, kind: str, below: bool, allowed: str,
                 what: str = "") -> APIError:
    """A value out of range, coded as OpenAI codes it (``integer_below_min_value``,
    ``decimal_above_max_value``, ...), naming the field and the range allowed."""
    side = "below_min" if below else "above_max"
    return bad(param, f"{what or repr(param)} is {value}, out of range: it must be {allowed}",
                f"{kind}_{side}_value")


def require_object(body: Any) -> dict[str, Any]:
    """The body as a JSON object, or a 400."""
    if not isinstance(body, dict):
        raise APIError(400, f"the request body must be a JSON object, got {kind_of(body)}")
    return body


def kind_of(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def required(body: dict[str, Any], name: str, where: str = "") -> Any:
    """The value of a required field. :raises APIError: OpenAI's refusal of one left out (or
    null), ``missing_required_parameter`` naming it (``where``: the prefix, ``messages[0].``)."""
    value = body.get(name)
    param = f"{where}{name}"
    if value is None:
        raise APIError(400, f"Missing required parameter: '{param}'.", param=param,
                       code="missing_required_parameter")
    return value
