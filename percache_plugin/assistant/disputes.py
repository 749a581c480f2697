"""Wrong answers must not spread: a stored answer that the user corrects, or that a regenerated
answer contradicts, stops being served to paraphrases until it is resolved (corrected by the
user, or regenerated)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..rag.grounding import key_facts

if TYPE_CHECKING:
    from ..rag.qa_bank import QAEntry
    from .assistant import Assistant

__all__ = ["key_facts", "contradicts", "correct", "dispute_paraphrases"]


def contradicts(a: str | None, b: str | None) -> bool:
    """Two answers disagree on facts: each names facts (numbers, days, names) and they share
    fewer than half of them. Answers without such facts are never taken as contradicting."""
    if not a or not b:
        return False
    fa, fb = key_facts(a), key_facts(b)
    if not fa or not fb:
        return False
    return len(fa & fb) / len(fa | fb) < 0.5


def dispute_paraphrases(a: Assistant, entry: QAEntry, *, include_self: bool = False) -> list[int]:
    """Mark stale the stored paraphrases of ``entry``'s question (same scope, similarity >= tau)
    that were not corrected by the user; returns their ids (hooks ``percache_qa_similar`` and
    ``percache_qa_mark_stale``)."""
    paraphrases = a.hooks.qa_similar(a.ctx, a.query(entry.question), entry.scope,
                                     a.config.similarity_threshold)
    ids = [e.id for e in paraphrases
           if (include_self or e.id != entry.id) and e.origin != "corrected"]
    return a.hooks.qa_mark_stale(a.ctx, ids)


def correct(a: Assistant, entry_id: int, answer: str) -> QAEntry:
    """The user's correction of a stored answer (hook ``percache_qa_correct``): the entry serves
    ``answer`` from now on, and its paraphrases (which carried the same wrong answer) are not
    served until regenerated or corrected too."""
    entry = a.hooks.qa_correct(a.ctx, entry_id, answer)
    dispute_paraphrases(a, entry)
    return entry
