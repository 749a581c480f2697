"""The ``messages`` of a chat request and its ``prediction``: roles, content strings or text
parts (other part types refused naming the part), message keys checked against the field table."""

from __future__ import annotations

from typing import Any

from .checks import bad, kind_of, required
from .errors import APIError
from .fields import MESSAGE, PART_TYPES, Handling, check_fields, shown

__all__ = ["ROLES", "parse_messages", "parse_prediction"]

ROLES = ("system", "developer", "user", "assistant")


def _part(i: int, j: int, part: Any) -> str:
    param = f"messages[{i}].content[{j}]"
    kind = part.get("type") if isinstance(part, dict) else None
    handling, why = PART_TYPES.get(kind, (None, "")) if isinstance(kind, str) else (None, "")
    if handling is Handling.REFUSED:
        raise APIError(400, f"{param} is a {kind!r} part, which is not supported by this server: {why}",
                       param=param, code="unsupported_content")
    if handling is None or not isinstance(part, dict) or not isinstance(part.get("text"), str):
        raise bad(param, f"{param} must be a text part ({{'type': 'text', 'text': ...}}), got {shown(part)}")
    return str(part["text"])


def _content(i: int, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: text parts, joined as they come
        return "".join(_part(i, j, part) for j, part in enumerate(value))
    raise bad(f"messages[{i}].content", f"messages[{i}].content must be a string, got {kind_of(value)}")


def parse_prediction(body: dict[str, Any]) -> str | None:
    """OpenAI's ``prediction``: ``{"type": "content", "content": text or text parts}``."""
    value = body.get("prediction")
    if value is None:
        return None
    form = "{'type': 'content', 'content': a string or text parts}"
    if not isinstance(value, dict) or value.get("type") != "content" or set(value) - {"type", "content"}:
        raise bad("prediction", f"'prediction' must be {form}, got {shown(value)}")
    content = value.get("content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and set(p) == {"type", "text"}
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content) or None
    raise bad("prediction", f"'prediction' must be {form}, got {shown(value)}")


def parse_messages(body: dict[str, Any]) -> tuple[dict[str, str], ...]:
    value = required(body, "messages")
    if not isinstance(value, list):
        raise bad("messages", f"'messages' must be an array of messages, got {kind_of(value)}")
    if not value:
        raise APIError(400, "'messages' is empty; send at least one message", param="messages",
                       code="empty_array")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}]", f"messages[{i}] must be an object, got {kind_of(m)}")
        check_fields(m, MESSAGE, f"messages[{i}].")
        role = required(m, "role", f"messages[{i}].")
        if role not in ROLES:
            raise bad(f"messages[{i}].role", f"messages[{i}].role is {role!r}; expected one of {', '.join(ROLES)}",
                       "invalid_value")
        out.append({"role": "system" if role == "developer" else str(role),
                    "content": _content(i, required(m, "content", f"messages[{i}]."))})
    return tuple(out)
