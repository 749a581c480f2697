"""A conversation to token ids (the model's chat template) and the context-length check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..decode.generate import context_limit
from .errors import APIError

__all__ = ["chat_ids", "text_ids", "max_new_tokens", "capped", "check_bias"]


def chat_ids(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """The ids of ``messages`` rendered by the tokenizer's chat template with the generation
    prompt, tokenized as one text without added special tokens (the template writes its own).

    :raises APIError: 400 when the tokenizer has no chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise APIError(400, "this model's tokenizer has no chat template; send a plain prompt "
                       "to /v1/completions instead", param="messages")
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return list(tokenizer(str(text), add_special_tokens=False)["input_ids"])


def text_ids(tokenizer: Any, prompt: str | Sequence[int]) -> list[int]:
    """A plain prompt's ids (the tokenizer's special tokens added, as ``pc.complete`` does)."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    vocab = len(tokenizer)
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        side = "below_min" if min(bad) < 0 else "above_max"
        raise APIError(400, f"'prompt' holds token ids {bad[:5]}, out of range: token ids must be "
                       f"between 0 and {vocab - 1} (the vocabulary)", param="prompt",
                       code=f"integer_{side}_value")
    return list(prompt)


def check_bias(tokenizer: Any, bias: Sequence[tuple[int, float]]) -> None:
    """:raises APIError: 400 when ``logit_bias`` names a token id outside the vocabulary."""
    vocab = len(tokenizer)
    bad = [i for i, _ in bias if i >= vocab]
    if bad:
        raise APIError(400, f"'logit_bias' names token ids {bad[:5]}, out of range: token ids must be "
                       f"between 0 and {vocab - 1} (the vocabulary)", param="logit_bias",
                       code="integer_above_max_value")


def max_new_tokens(model: Any, n_prompt: int, requested: int | None, default: int,
                   prompt_param: str = "messages", requested_param: str = "max_tokens") -> int:
    """How many tokens to generate: ``requested``, or ``default`` capped by the room left.

    :raises APIError: 400 ``context_length_exceeded`` when the prompt plus the requested tokens
        do not fit the model's context (the message gives the numbers, as OpenAI's does)."""
    limit = context_limit(model)
    if limit is None:
        return requested or default
    return capped(limit, n_prompt, requested, default, prompt_param, requested_param)


def capped(limit: int, n_prompt: int, requested: int | None, default: int,
           prompt_param: str = "messages", requested_param: str = "max_tokens") -> int:
    """:func:`max_new_tokens` for a context of ``limit`` tokens; ``prompt_param`` is the field
    named when the prompt alone leaves no room (``messages``, ``prompt``, ``question``),
    ``requested_param`` the one named when ``requested`` is too many."""
    room = limit - n_prompt
    if requested is None:
        if room < 1:
            raise APIError(400, f"This model's maximum context length is {limit} tokens. However, "
                           f"your {prompt_param} resulted in {n_prompt} tokens.", param=prompt_param,
                           code="context_length_exceeded")
        return min(default, room)
    if requested > room:
        raise APIError(400, f"This model's maximum context length is {limit} tokens. However, you "
                       f"requested {n_prompt + requested} tokens ({n_prompt} in the {prompt_param}, "
                       f"{requested} in the completion). Please reduce the length of the "
                       f"{prompt_param} or completion.", param=requested_param, code="context_length_exceeded")
    return requested
