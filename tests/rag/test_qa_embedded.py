"""The embedder guards of one lookup: align, combined and joint share one ``embed_words`` call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.meaning import question_shape
from percache_plugin.rag.qa_embedded import embedded_verdicts


class CountingEmbedder(HashEmbedder):
    """A hash embedder that counts its ``embed_words`` calls."""

    def __init__(self) -> None:
        super().__init__(64)
        self.word_calls = 0

    def embed_words(self, texts: Sequence[str]) -> list[tuple[tuple[str, ...], np.ndarray]]:
        self.word_calls += 1
        return super().embed_words(texts)  # type: ignore[no-any-return]


def test_word_guards_share_one_embed_words_call() -> None:
    asked = "What did Kim bring to the picnic?"
    stored = ["What did Kim bring to the party?", "What did Kim cook for the picnic?"]
    candidates: list[Any] = [(s, question_shape(s), 0.8) for s in stored]
    guards = {"align", "combined", "joint"}
    embedder = CountingEmbedder()
    together = embedded_verdicts(asked, candidates, guards, embedder)
    assert embedder.word_calls == 1
    alone = {}
    for guard in guards:  # each guard on its own gives the same verdicts
        rows = embedded_verdicts(asked, candidates, {guard}, CountingEmbedder())
        alone[guard] = [row[guard] for row in rows]
    assert [{g: row[g] for g in guards} for row in together] == [
        {g: alone[g][i] for g in guards} for i in range(len(stored))]
