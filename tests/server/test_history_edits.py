"""A client rewrites the history it sends (edits an earlier message, regenerates the last reply,
changes or drops the system message, trims the oldest turns, interleaves two conversations
sharing a prefix): every greedy answer equals plain generate over the history as sent, whatever
the blocks cached from the earlier requests."""

from __future__ import annotations

import os
from typing import Any

from tests.helpers import baseline
from tests.server.conftest import MODEL, post_json

N = 6
SYSTEM = {"role": "system", "content": "Be brief. Answer the question from the notes you were given."}


def _ids(pc: Any, messages: list[dict[str, str]]) -> list[int]:
    text = pc.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(pc.tokenizer(text, add_special_tokens=False)["input_ids"])


def _ask(pc: Any, server: Any, messages: list[dict[str, str]]) -> tuple[str, int]:
    status, body = post_json(server, "/v1/chat/completions",
                             {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": N})
    assert status == 200, body
    with pc.disabled():
        want, _ = baseline(pc.model, _ids(pc, messages), N)
    answer = body["choices"][0]["message"]["content"]
    assert answer == pc.tokenizer.decode(want, skip_special_tokens=True)
    return answer, int(body["usage"]["prompt_tokens_details"]["cached_tokens"])


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_rewritten_histories_equal_plain_generate(pc: Any, server: Any) -> None:
    first = [SYSTEM, _user("Hello, what is the plan for Friday evening at the hall?")]
    a1, _ = _ask(pc, server, first)
    second = [*first, {"role": "assistant", "content": a1}, _user("And what about Monday morning?")]
    a2, _ = _ask(pc, server, second)
    again, cached = _ask(pc, server, second)  # the last reply regenerated
    assert again == a2 and cached > 0
    edited_user = [SYSTEM, _user("Hello, what is the plan for Friday morning at the hall?"), *second[2:]]
    _, cached = _ask(pc, server, edited_user)
    same = len(os.path.commonprefix([_ids(pc, second), _ids(pc, edited_user)]))
    assert 0 < cached <= same  # only blocks before the edit
    _ask(pc, server, [*second[:2], {"role": "assistant", "content": a1 + " Also."}, second[3]])
    _ask(pc, server, [{"role": "system", "content": "Be long."}, *second[1:]])
    _ask(pc, server, second[1:])
    third = [*second, {"role": "assistant", "content": a2}, _user("Thanks.")]
    _ask(pc, server, third)
    _ask(pc, server, [SYSTEM, *third[3:]])  # the oldest exchange trimmed by the client
    _ask(pc, server, [SYSTEM, _user(first[1]["content"] + " Or Saturday?")])  # another conversation
    _, cached = _ask(pc, server, third)  # back to the first one
    assert cached > 0
