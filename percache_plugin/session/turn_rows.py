"""Reading a saved turn's ids (a ``chat_turns`` row's JSON columns) when the row may be corrupt.

A column that is not the JSON written is a miss, as an unreadable memory region is
(:func:`~.forget_rows.read_region`), never a crash:

* ``user_ids`` or ``reply_ids`` unreadable: the turn cannot be recomputed; it is dropped.
* ``fact_ids`` unreadable: the facts recalled into the turn are unknown, so its memory block
  leaves (``user_ids`` become ``bare_ids``, as forgetting one of them would do); with no
  ``bare_ids`` nothing was recalled and the turn is kept as it is.
* ``bare_ids`` unreadable: the turn is kept when it recalled no fact; otherwise its memory
  block cannot be taken out (a forget could not find the fact in it) and the turn is dropped.

Either way the session's K/V snapshot no longer matches its ids and is not served; the caller
lists the turn ids (:attr:`~.state.Session.unreadable_turns`) and rewrites the rows.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

__all__ = ["TurnIds", "read_ids", "read_turn_ids"]


class TurnIds(NamedTuple):
    """A saved turn's ids as readable; ``repaired``: a column was unreadable (the memory block
    left, or a stray ``bare_ids`` was ignored)."""

    user_ids: list[int]
    reply_ids: list[int]
    fact_ids: list[str]
    bare_ids: list[int] | None
    repaired: bool


def read_ids(text: Any) -> list[int] | None:
    """A JSON list of token ids, or None when ``text`` is not one."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return None
    return value


def _fact_ids(text: Any) -> list[str] | None:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        return None
    return value


def read_turn_ids(user: Any, reply: Any, facts: Any, bare: Any) -> TurnIds | None:
    """The ids of a ``chat_turns`` row from its ``user_ids``, ``reply_ids``, ``fact_ids`` and
    ``bare_ids`` columns; None: the turn is unreadable and leaves (see the module docstring)."""
    user_ids, reply_ids = read_ids(user), read_ids(reply)
    if user_ids is None or reply_ids is None:
        return None
    fact_ids = _fact_ids(facts)
    bare_ids = None if bare is None else read_ids(bare)
    if bare is not None and bare_ids is None:  # the block cannot be taken out unless none was recalled
        return TurnIds(user_ids, reply_ids, [], None, True) if fact_ids == [] else None
    if fact_ids is None:  # which facts are unknown: the memory block (if any) leaves
        return TurnIds(user_ids if bare_ids is None else bare_ids, reply_ids, [], None, True)
    return TurnIds(user_ids, reply_ids, fact_ids, bare_ids, False)
