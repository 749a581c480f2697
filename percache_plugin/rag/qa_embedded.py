"""The meaning guards judged only for candidates that reach tau and pass every other guard,
outside the QA bank's lock: those that need the embedder (``residue``, ``align``,
``combined``, ``joint``: one ``embed`` call for ``residue``, one ``embed_words`` call shared by
the others) and ``lexical`` (WordNet, read once per process)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Final

from percache_plugin.rag.align import EmbedWords, WordVectors, align_verdicts
from percache_plugin.rag.combined import combined_verdicts
from percache_plugin.rag.embeddings import Embedder
from percache_plugin.rag.joint import joint_verdicts
from percache_plugin.rag.lexical import lexical_verdicts
from percache_plugin.rag.meaning import QuestionShape, question_shape
from percache_plugin.rag.residue import residue_verdicts
from percache_plugin.rag.wordnet import has_wordnet

__all__ = ["EMBEDDED_GUARDS", "WORD_GUARDS", "Candidate", "can_align", "embedded_verdicts"]

EMBEDDED_GUARDS: Final = frozenset(("residue", "align", "combined", "joint", "lexical"))
"""Meaning guards judged only where they decide (they call the embedder or read WordNet); the
others compare features computed once."""

Candidate = tuple[str, QuestionShape, float]
WORD_GUARDS: Final = frozenset(("align", "combined", "joint"))
"""Guards that compare contextual word vectors (``embed_words``): one call serves them all."""
"""A stored question, its shape and its similarity to the asked question."""


def _shared(embed_words: EmbedWords) -> EmbedWords:
    """``embed_words`` computing each text once per lookup: align, combined and joint ask for
    the same texts, in the same batch."""
    memo: dict[str, WordVectors] = {}

    def embed(texts: Sequence[str]) -> list[WordVectors]:
        missing = [t for t in dict.fromkeys(texts) if t not in memo]
        if missing:
            memo.update(zip(missing, embed_words(missing), strict=True))
        return [memo[t] for t in texts]

    return embed


def can_align(embedder: Embedder) -> bool:
    """Whether ``embedder`` gives contextual word vectors (``embed_words``) for ``align``,
    ``combined`` and ``joint``."""
    return callable(getattr(embedder, "embed_words", None))


def embedded_verdicts(question: str, candidates: Sequence[Candidate], guards: Collection[str],
                      embedder: Embedder) -> list[dict[str, bool]]:
    """Each candidate's verdict from every guard of ``guards`` that can run (``align``,
    ``combined`` and ``joint`` need :func:`can_align`, ``lexical`` the WordNet files; they are
    left out otherwise: :func:`~percache_plugin.rag.guards.check_meaning` refuses ``lexical``
    without them, so it is left out only when audited)."""
    out: list[dict[str, bool]] = [{} for _ in candidates]
    if not candidates:
        return out
    if "lexical" in guards and has_wordnet():
        ok = lexical_verdicts([(question, stored) for stored, _, _ in candidates])
        for row, verdict in zip(out, ok, strict=True):
            row["lexical"] = verdict
    if "residue" in guards:
        shape = question_shape(question)
        ok = residue_verdicts([(shape, s, sim) for _, s, sim in candidates], embedder.embed)
        for row, verdict in zip(out, ok, strict=True):
            row["residue"] = verdict
    if can_align(embedder) and WORD_GUARDS.intersection(guards):
        embed_words = _shared(embedder.embed_words)  # type: ignore[attr-defined]
        pairs = [(question, stored) for stored, _, _ in candidates]
        runs: dict[str, Callable[[], list[bool]]] = {
            "align": lambda: align_verdicts(pairs, embed_words),
            "combined": lambda: combined_verdicts(pairs, embed_words),
            "joint": lambda: joint_verdicts([(question, stored, sim) for stored, _, sim in candidates],
                                            embed_words),
        }
        for name, run in runs.items():
            if name in guards:
                for row, verdict in zip(out, run(), strict=True):
                    row[name] = verdict
    return out
