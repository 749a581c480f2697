"""Users of ``percache bench e2e``: QMSum meeting series, their questions, a memoizing embedder."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..rag.embeddings import Embedder
from ..rag.qmsum import Meeting, iter_series

__all__ = ["Question", "User", "corpus_of", "select_users", "MemoEmbedder"]

_CORPORA = ("AMI", "ICSI", "committee")


# -- users ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    """One query of a stream; a rewording of an earlier query carries ``repeat_of`` (that
    query's index in the stream) and ``original`` (its text), and keeps its reference answer."""

    text: str
    answer: str
    meeting: str
    repeat_of: int | None = None
    original: str | None = None


@dataclass(frozen=True)
class User:
    """One replayed user: a meeting series' meetings (documents) and questions, in order."""

    id: str
    corpus: str
    meetings: tuple[Meeting, ...]
    questions: tuple[Question, ...]


def corpus_of(series: str) -> str:
    """``AMI`` (``ES2002``), ``ICSI`` (``Bed``) or ``committee`` (``covid``)."""
    if re.fullmatch(r"[A-Z]{2}\d{4}", series):
        return "AMI"
    if re.fullmatch(r"B[a-z]{2}", series):
        return "ICSI"
    return "committee"


def _user(series: str, meetings: Sequence[Meeting], n_queries: int) -> User:
    qs = [Question(q.text, q.answer, m.id) for m in meetings for q in m.queries
          if q.kind == "specific"]
    return User(series, corpus_of(series), tuple(meetings), tuple(qs[:n_queries]))


def select_users(root: Path, n_users: int, n_queries: int, *, max_meetings: int,
                 series: Sequence[str] | None = None,
                 eligible: Callable[[User], bool] | None = None) -> list[User]:
    """Users with at least ``n_queries`` specific questions in their first ``max_meetings``
    meetings (and, for the default choice, ``eligible``); the default choice alternates AMI,
    ICSI and committee series (each in id order), ``series`` names them instead. Raises
    ValueError when none qualifies or a name is unknown."""
    if n_users < 1 or n_queries < 1 or max_meetings < 1:
        raise ValueError("--users, --queries and --max-meetings must be at least 1")
    all_series = {s: ms[:max_meetings] for s, ms in iter_series(root)}
    if series:
        unknown = [s for s in series if s not in all_series]
        if unknown:
            raise ValueError(f"unknown series {unknown}; known: {sorted(all_series)}")
        return [_user(s, all_series[s], n_queries) for s in series[:n_users]]
    by_corpus: dict[str, list[User]] = {c: [] for c in _CORPORA}
    for s, ms in all_series.items():
        user = _user(s, ms, n_queries)
        if len(user.questions) >= n_queries and (eligible is None or eligible(user)):
            by_corpus[user.corpus].append(user)
    users: list[User] = []
    while len(users) < n_users and any(by_corpus.values()):
        for corpus in _CORPORA:
            if by_corpus[corpus] and len(users) < n_users:
                users.append(by_corpus[corpus].pop(0))
    if not users:
        raise ValueError(f"no QMSum series under {root} has {n_queries} specific questions in its "
                         f"first {max_meetings} meetings"
                         + (" and rewordings for the paraphrase stream" if eligible else "")
                         + " (lower --queries or raise --max-meetings)")
    return users


# -- embedder -------------------------------------------------------------------------------
class MemoEmbedder:
    """Wraps an embedder; inside :meth:`caching` it remembers vectors by text.

    Every method of a user adds the same documents: their chunks are embedded once, not once
    per method (document arrival is untimed anyway). Questions are always embedded afresh, so
    no method's timed lookups profit from another's work."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self._memo: dict[str, np.ndarray] = {}
        self._caching = False

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dim(self) -> int:
        return self._inner.dim

    @contextlib.contextmanager
    def caching(self) -> Iterator[None]:
        self._caching = True
        try:
            yield
        finally:
            self._caching = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not self._caching:
            return self._inner.embed(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for text, vec in zip(missing, self._inner.embed(missing), strict=True):
                self._memo[text] = vec
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts]).astype(np.float32)


# -- one replay -----------------------------------------------------------------------------
