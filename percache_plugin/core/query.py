"""A question on its way through one request: its text, and its embedding once computed."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["Query"]


class Query:
    """The user's question for one ``ask()`` (or one idle task).

    Retrieval, the QA-bank lookup and the QA-bank store all need the question's embedding;
    :attr:`embedding` computes it on first use and keeps it, so one request embeds the question
    at most once however many hooks read it.

    :param text: the question.
    :param embed: turns a list of texts into a ``[n, dim]`` array (the banks' embedder).
    """

    __slots__ = ("text", "_embed", "_vector")

    def __init__(self, text: str, embed: Callable[[list[str]], np.ndarray]) -> None:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"the question must be a non-empty str, got {text!r}")
        self.text = text
        self._embed = embed
        self._vector: np.ndarray | None = None

    @property
    def embedding(self) -> np.ndarray:
        """The question's embedding (computed once)."""
        if self._vector is None:
            self._vector = np.asarray(self._embed([self.text])[0])
        return self._vector

    @property
    def embedded(self) -> bool:
        """Whether the embedding was computed already."""
        return self._vector is not None

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Query({self.text!r})"
