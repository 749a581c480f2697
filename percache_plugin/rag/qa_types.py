"""The QA bank's public value types and the checks of its arguments."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "ALL_SCOPES",
    "DEFAULT_BYTE_LIMIT",
    "ORIGINS",
    "AllScopes",
    "EntryTooLargeError",
    "LookupResult",
    "Origin",
    "QAEntry",
    "QAMatch",
    "check_answer",
    "check_ids",
    "check_limit",
    "check_question",
    "check_scope",
    "qkey",
]

Origin = Literal["user", "predicted", "corrected"]
ORIGINS: Final = ("user", "predicted", "corrected")
DEFAULT_BYTE_LIMIT: Final = 100 * 2**20


class AllScopes:
    def __repr__(self) -> str:
        return "ALL_SCOPES"


ALL_SCOPES: Final = AllScopes()
"""``entries(scope=ALL_SCOPES)`` lists every scope; ``scope=None`` only unscoped entries."""


class EntryTooLargeError(ValueError):
    """An entry is larger than the bank's whole byte limit."""


@dataclass(frozen=True)
class QAEntry:
    """A stored question. ``answer`` is ``None`` for a prefill-only entry; ``sources`` are
    the chunk ids the answer was generated from; ``hits`` counts served lookups (LFU);
    ``nbytes`` is what the entry counts against the byte limit; ``model`` is the
    fingerprint of the model that answered (``""``: not recorded). ``tokens`` are the ids the
    answer was generated as and ``ended`` how its generation ended (``"eos"``, ``"cap"``;
    ``"given"`` for a caller's answer or correction; ``None``: unknown); they decide which
    ``max_new_tokens`` it is served to (:mod:`percache_plugin.rag.qa_length`)."""

    id: int
    question: str
    answer: str | None
    scope: str | None
    sources: tuple[str, ...]
    stale: bool
    hits: int
    created: float
    last_access: float
    origin: str
    nbytes: int
    model: str = ""
    tokens: tuple[int, ...] | None = None
    ended: str | None = None


@dataclass(frozen=True)
class QAMatch:
    """A candidate with its cosine similarity and the guard outcomes (see ``guards``)."""

    entry: QAEntry
    similarity: float
    guards: Mapping[str, bool | float]


@dataclass(frozen=True)
class LookupResult:
    """``match``: the entry served, or ``None``. ``best``: the most similar candidate of
    the question's scope and model (``None`` if there is none). ``rejected_by``: on a miss,
    the first guard the best candidate failed (see ``guards.REASONS``); ``None`` when the
    scope holds nothing for this model. Nothing in a result depends on what other scopes
    (or, unless shared, other models) hold."""

    match: QAMatch | None
    best: QAMatch | None
    rejected_by: str | None


def qkey(question: str) -> str:
    """The identity of a question within a scope: case and whitespace folded."""
    return " ".join(question.casefold().split())


def check_question(question: object) -> str:
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question must be a non-empty str, got {question!r}")
    return question.strip()


def check_answer(answer: object, *, optional: bool) -> str | None:
    if answer is None and optional:
        return None
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a str{' or None' if optional else ''}, got {answer!r}")
    return answer


def check_scope(scope: object) -> str | None:
    if scope is not None and (not isinstance(scope, str) or not scope):
        raise ValueError(f"scope must be a non-empty str or None, got {scope!r}")
    return scope


def check_ids(ids: object, what: str) -> tuple[str, ...]:
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise TypeError(f"{what} must be a sequence of chunk ids (str), got {ids!r}")
    items = tuple(ids)
    bad = [i for i in items if not isinstance(i, str)]
    if bad:
        raise TypeError(f"{what} must hold chunk ids (str), got {bad[0]!r}")
    return tuple(dict.fromkeys(items))


def check_limit(limit: object) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"byte_limit must be a non-negative int or None, got {limit!r}")
    return limit
