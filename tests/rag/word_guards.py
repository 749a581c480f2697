"""Checks shared by the tests of the guards that read word vectors (``align``, ``combined``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from percache_plugin.rag.align import EmbedWords, WordVectors
from percache_plugin.rag.embeddings import HashEmbedder, load_embedder, question_words
from percache_plugin.rag.guards import DEFAULT_MEANING_GUARDS
from percache_plugin.rag.qa_bank import QABank
from tests.rag.test_qa_bank import CountingEmbedder

__all__ = ["OTHERS", "STORED", "DIFFERENT", "check_counted_without_word_vectors",
           "check_embeds_each_question_once", "check_refused_and_audited", "words"]

OTHERS = tuple(sorted(DEFAULT_MEANING_GUARDS - {"align", "residue", "combined"}))
"""The default meaning guards that do not read word vectors."""
STORED = "When did Jolene buy her pet Seraphim?"
DIFFERENT = "When did Jolene walk Seraphim in the park?"

Verdicts = Callable[[Sequence[tuple[str, str]], EmbedWords], list[bool]]


def words(table: dict[str, list[float]], text: str) -> WordVectors:
    """Word vectors from a table (unit-normed); words missing from it get a vector of their own."""
    found = tuple(w for w, _, _ in question_words(text))
    dim = len(next(iter(table.values())))
    rows = [np.array(table[w], np.float32) if w in table else
            np.eye(dim, dtype=np.float32)[len(w) % (dim - 2) + 2] for w in found]
    return found, np.stack([r / np.linalg.norm(r) for r in rows])


def check_embeds_each_question_once(verdicts: Verdicts) -> None:
    """``verdicts`` passes a question against itself, refuses DIFFERENT, and embeds each
    distinct question once (none for no pairs)."""
    calls: list[list[str]] = []
    inner = HashEmbedder(64)

    def embed_words(texts: Sequence[str]) -> list[WordVectors]:
        calls.append(list(texts))
        return inner.embed_words(texts)

    assert verdicts([(STORED, STORED), (STORED, DIFFERENT)], embed_words) == [True, False]
    assert calls == [[STORED, DIFFERENT]]
    assert verdicts([], embed_words) == [] and len(calls) == 1


def check_refused_and_audited(guard: str) -> None:
    """With ``guard`` on, the QA bank refuses DIFFERENT for STORED (hash embedder); off, it
    serves it, and counts it as served with the guard off only when audited."""
    bank = QABank(None, load_embedder("hash"), byte_limit=None)
    bank.add(STORED, "In May.")
    on = bank.lookup(DIFFERENT, tau=0.3, meaning=(*OTHERS, guard))
    assert on.match is None and on.rejected_by == guard
    assert bank.lookup(DIFFERENT, tau=0.3, meaning=OTHERS).match is not None
    assert bank.stats()["served_with_guard_off"][guard] == 0  # type: ignore[index]
    bank.lookup(DIFFERENT, tau=0.3, meaning=OTHERS, audit=True)
    assert bank.stats()["served_with_guard_off"][guard] == 1  # type: ignore[index]


def check_counted_without_word_vectors(guard: str) -> None:
    """An embedder without ``embed_words``: ``guard`` does not decide, the bank counts it."""
    bank = QABank(None, CountingEmbedder(), byte_limit=None)
    bank.add(STORED, "In May.")
    assert bank.lookup(DIFFERENT, tau=0.3, meaning=(*OTHERS, guard)).match is not None
    assert bank.stats()["align_unavailable"] == 1
