"""Response bodies in OpenAI's formats (chat completion, text completion, their stream chunks)
and percache's answer format, each with a ``percache`` field saying what the cache did."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .jobs import Outcome

__all__ = ["Format", "sse", "usage"]


def sse(data: dict[str, Any] | str) -> str:
    """One server-sent event."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def usage(o: Outcome) -> dict[str, Any]:
    accepted, rejected = o.prediction_tokens()
    return {"prompt_tokens": o.prompt_tokens, "completion_tokens": o.completion_tokens,
            "total_tokens": o.prompt_tokens + o.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": o.cached_tokens},
            "completion_tokens_details": {"accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": rejected}}


def _reason(o: Outcome) -> str:
    return "length" if o.finish_reason == "length" else "stop"


@dataclass
class Format:
    """Bodies of one response. ``kind``: ``"chat"``, ``"text"`` or ``"answer"``."""

    kind: str
    model: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))

    def _head(self, obj: str, prefix: str) -> dict[str, Any]:
        return {"id": f"{prefix}-{self.id}", "object": obj, "created": self.created, "model": self.model}

    def full(self, o: Outcome) -> dict[str, Any]:
        if self.kind == "chat":
            body = self._head("chat.completion", "chatcmpl")
            body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": o.text},
                                "logprobs": None, "finish_reason": _reason(o)}]
        elif self.kind == "text":
            body = self._head("text_completion", "cmpl")
            body["choices"] = [{"index": 0, "text": o.text, "logprobs": None, "finish_reason": _reason(o)}]
        else:
            body = self._head("percache.answer", "ans")
            body.update(answer=o.text, source=o.source, sources=list(o.sources),
                        matched_question=o.matched_question, finish_reason=_reason(o))
        body["usage"] = usage(o)
        body["percache"] = o.cache_info()
        return body

    def first(self) -> dict[str, Any] | None:
        """The chunk announcing the assistant's role (chat only)."""
        if self.kind != "chat":
            return None
        return self._chunk({"role": "assistant", "content": ""}, None)

    def delta(self, text: str) -> dict[str, Any]:
        return self._chunk({"content": text} if self.kind == "chat" else text, None)

    def last(self, o: Outcome) -> dict[str, Any]:
        """The chunk with the finish reason and the ``percache`` field."""
        body = self._chunk({} if self.kind == "chat" else "", _reason(o))
        body["percache"] = o.cache_info()
        if self.kind == "answer":
            body.update(source=o.source, sources=list(o.sources), matched_question=o.matched_question,
                        answer=o.text)
        return body

    def usage_chunk(self, o: Outcome) -> dict[str, Any]:
        body = self._chunk(None, None)
        body["choices"] = []
        body["usage"] = usage(o)
        return body

    def _chunk(self, delta: Any, reason: str | None) -> dict[str, Any]:
        if self.kind == "chat":
            body = self._head("chat.completion.chunk", "chatcmpl")
            body["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]
        elif self.kind == "text":
            body = self._head("text_completion", "cmpl")
            body["choices"] = [{"index": 0, "text": delta or "", "logprobs": None, "finish_reason": reason}]
        else:
            body = self._head("percache.answer.chunk", "ans")
            body.update(delta=delta or "", finish_reason=reason)
        return body
