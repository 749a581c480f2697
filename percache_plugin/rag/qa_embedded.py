"""The meaning guards that need the embedder (``residue``, ``align``, ``combined``, ``joint``):
their verdicts for the candidates of one lookup, in one embedder call per guard, made outside
the QA bank's lock."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Final

from percache_plugin.rag.align import align_verdicts
from percache_plugin.rag.combined import combined_verdicts
from percache_plugin.rag.embeddings import Embedder
from percache_plugin.rag.joint import joint_verdicts
from percache_plugin.rag.meaning import QuestionShape, question_shape
from percache_plugin.rag.residue import residue_verdicts

__all__ = ["EMBEDDED_GUARDS", "Candidate", "can_align", "embedded_verdicts"]

EMBEDDED_GUARDS: Final = frozenset(("residue", "align", "combined", "joint"))
"""Meaning guards that call the embedder; the others compare features computed once."""

Candidate = tuple[str, QuestionShape, float]
"""A stored question, its shape and its similarity to the asked question."""


def can_align(embedder: Embedder) -> bool:
    """Whether ``embedder`` gives contextual word vectors (``embed_words``) for ``align``,
    ``combined`` and ``joint``."""
    return callable(getattr(embedder, "embed_words", None))


def embedded_verdicts(question: str, candidates: Sequence[Candidate], guards: Collection[str],
                      embedder: Embedder) -> list[dict[str, bool]]:
    """Each candidate's verdict from every guard of ``guards`` that can run (``align``,
    ``combined`` and ``joint`` need :func:`can_align`; they are left out otherwise)."""
    out: list[dict[str, bool]] = [{} for _ in candidates]
    if not candidates:
        return out
    if "residue" in guards:
        shape = question_shape(question)
        ok = residue_verdicts([(shape, s, sim) for _, s, sim in candidates], embedder.embed)
        for row, verdict in zip(out, ok, strict=True):
            row["residue"] = verdict
    if "align" in guards and can_align(embedder):
        embed_words = embedder.embed_words  # type: ignore[attr-defined]
        ok = align_verdicts([(question, stored) for stored, _, _ in candidates], embed_words)
        for row, verdict in zip(out, ok, strict=True):
            row["align"] = verdict
    if "combined" in guards and can_align(embedder):
        embed_words = embedder.embed_words  # type: ignore[attr-defined]
        ok = combined_verdicts([(question, stored) for stored, _, _ in candidates], embed_words)
        for row, verdict in zip(out, ok, strict=True):
            row["combined"] = verdict
    if "joint" in guards and can_align(embedder):
        embed_words = embedder.embed_words  # type: ignore[attr-defined]
        ok = joint_verdicts([(question, stored, sim) for stored, _, sim in candidates],
                            embed_words)
        for row, verdict in zip(out, ok, strict=True):
            row["joint"] = verdict
    return out
