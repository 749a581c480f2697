"""How a conversation becomes token ids: each part tokenized on its own, then concatenated.

A conversation is ``head + turn_1 + reply_1 + turn_2 + reply_2 + ...`` where ``head`` is the
template's opening and the system prompt (the persistent region), each ``turn`` is the glue
before a user message, the message and the generation prompt, and each ``reply`` the ids the
model generated (never re-tokenized). The glue comes from the chat template rendered with
sentinel strings in place of the contents, so where the template renders every turn the same
way, the decoded concatenation equals the template's own rendering (``template_exact``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ChatLayout", "LayoutError"]

_MARK = "\u2063PERCACHE-TURN-{}\u2063"
_PLAIN_TURN = ("\n\nUser: ", "\nAssistant:")


class LayoutError(ValueError):
    """The chat template cannot be split into per-turn pieces."""


@dataclass(frozen=True)
class _Glue:
    before_system: str  # the template's opening up to the system content ("" without one)
    after_system: str  # between the system content and the first user content's turn glue
    turn: str  # before every user message (after the previous reply)
    prompt: str  # after the user message: the generation prompt
    exact: bool  # the rendering of a whole conversation equals the concatenation


class ChatLayout:
    """Token ids of a conversation's parts for one tokenizer.

    :param tokenizer: a transformers tokenizer.
    :param use_template: render with the tokenizer's chat template (else a plain
        ``User:``/``Assistant:`` layout after the tokenizer's BOS).
    """

    def __init__(self, tokenizer: Any, use_template: bool) -> None:
        self.tokenizer = tokenizer
        self.use_template = use_template
        self._glue = self._split() if use_template else None

    def follow(self, use_template: bool) -> None:
        """Render with (or without) the chat template from now on (``configure(chat_template=)``):
        later turns, heads of new sessions and of sessions without turns. Turns already in a
        conversation keep their ids, as a handle resuming it from the store would.

        :raises LayoutError: the template cannot be split (nothing changes)."""
        if use_template != self.use_template:
            self._glue = self._split() if use_template else None
            self.use_template = use_template

    @property
    def template_exact(self) -> bool:
        """Whether concatenated turns decode to the template's rendering of the conversation."""
        return self._glue.exact if self._glue is not None else True

    def _render(self, messages: list[dict[str, str]]) -> str:
        return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    def _split(self) -> _Glue:
        m = [_MARK.format(i) for i in range(4)]
        with_sys = self._render([{"role": "system", "content": m[0]}, {"role": "user", "content": m[1]},
                                 {"role": "assistant", "content": m[2]}, {"role": "user", "content": m[3]}])
        parts = _parts(with_sys, m)
        if parts is None:
            raise LayoutError("the chat template drops a message; use chat_template=False")
        before_sys, sys_to_u1, u1_to_a1, a1_to_u2, tail = parts
        turn = a1_to_u2
        after_sys = sys_to_u1[: len(sys_to_u1) - len(turn)] if sys_to_u1.endswith(turn) else sys_to_u1
        first_glue = turn if sys_to_u1.endswith(turn) else ""
        exact = u1_to_a1 == tail and sys_to_u1 == after_sys + first_glue
        return _Glue(before_sys, after_sys, turn, tail, exact and first_glue == turn)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def head(self, system: str | None) -> tuple[list[int], str]:
        """Ids of the persistent region (the template's opening and the system prompt) and the
        glue the first user turn starts with (later turns start with the glue after a reply).

        Without a system prompt, whatever the template puts first (some add a default system
        message) is rendered by the template itself."""
        if self._glue is None:
            bos = list(self.tokenizer("", add_special_tokens=True)["input_ids"])
            return bos + (self._ids(system + "\n") if system else []), _PLAIN_TURN[0]
        turn = self._glue.turn
        if system is not None:
            return self._ids(self._glue.before_system + system + self._glue.after_system), turn
        m = _MARK.format(0)
        opening = self._render([{"role": "user", "content": m}]).partition(m)[0]
        if opening.endswith(turn):
            return self._ids(opening[: len(opening) - len(turn)]), turn
        common = _common_suffix(opening, turn)
        return self._ids(opening[: len(opening) - common]), opening[len(opening) - common:]

    def turn(self, message: str, glue: str | None = None) -> list[int]:
        """Ids of one user turn: the glue before it (``glue``, default the glue after a reply),
        the message and the generation prompt."""
        if self._glue is None:
            return self._ids((glue or _PLAIN_TURN[0]) + message + _PLAIN_TURN[1])
        return self._ids((self._glue.turn if glue is None else glue) + message + self._glue.prompt)


def _common_suffix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _parts(rendered: str, marks: Sequence[str]) -> list[str] | None:
    out: list[str] = []
    rest = rendered
    for mark in marks:
        before, found, rest = rest.partition(mark)
        if not found:
            return None
        out.append(before)
    out.append(rest)
    return out
