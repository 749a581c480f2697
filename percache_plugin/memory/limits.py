"""How long a fact may be (``Config.memory_fact_tokens``): a fact is recalled into a chat turn
whole, so one longer than the context leaves for it would make every turn recalling it fail
(``MessageTooLong``); it is refused when it is added or updated instead, and dropped (counted)
when extraction finds it."""

from __future__ import annotations

from typing import Any

from ..config import Config

__all__ = ["DEFAULT_FACT_TOKENS", "check_fact_length", "fact_token_limit", "fact_tokens"]

DEFAULT_FACT_TOKENS = 1024
"""The limit when ``Config.memory_fact_tokens`` is None and the model states no context."""


def fact_token_limit(config: Config, context: int | None) -> int:
    """The most tokens a fact may have: ``Config.memory_fact_tokens`` when set, else the model's
    ``context`` shared by twice ``memory_k`` (the facts one turn recalls then take at most half
    of the context), else :data:`DEFAULT_FACT_TOKENS`."""
    if config.memory_fact_tokens is not None:
        return int(config.memory_fact_tokens)
    if context is None:
        return DEFAULT_FACT_TOKENS
    return max(1, context // (2 * config.memory_k))


def fact_tokens(tokenizer: Any, text: str) -> int:
    """The fact's length in the model's tokens, as a recalled fact line holds it."""
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_fact_length(tokenizer: Any, text: str, limit: int) -> None:
    """Raise ValueError naming the fact's length and ``limit`` when it is longer."""
    if not isinstance(text, str):  # the bank raises the TypeError
        return
    n = fact_tokens(tokenizer, text)
    if n > limit:
        raise ValueError(
            f"a fact of {n} tokens is longer than the limit of {limit} tokens "
            "(Config.memory_fact_tokens; by default the model's context shared by 2 * memory_k): "
            "a chat turn recalling it would not fit; shorten or split it")
