"""A small data table of abbreviations the key-terms guard reads as their long form.

The key-terms guard (:func:`~percache_plugin.rag.guards.question_terms`) takes an acronym
("TV", "ER") for a name that the other question must name too, so "What did Calvin watch on
TV?" / "... on television?" was refused, a paraphrase miss. Each entry maps an abbreviation (as
key terms compare words: case-folded, see :func:`~percache_plugin.rag.guards.term_stem`) to its
long forms; a question that writes one is taken to name the other too, both ways. Each entry
names the already-seen pair it came from (v2-v4: the paraphrases of
``benchmarks/data/qa_fresh2_heldout.json`` ... ``qa_fresh4_heldout.json``; dev: the QMSum
val-split paraphrases of ``qa_paraphrases_val2.json``). It is a table, not a rule: an
abbreviation not listed still has to be written the same way in both questions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = ["ABBREVIATIONS", "with_long_forms"]

ABBREVIATIONS: Final[dict[str, tuple[str, ...]]] = {
    "er": ("emergency room",),    # v2 "When was Sam in the ER?" / "... the emergency room?"
    "so": ("significant other",),  # v3 "a vacation with his SO" / "his significant other"
    "tv": ("television",),        # v4 "the television screen" / "the TV screen"
    "ui": ("user interface",),    # dev "the User Interface" / "the UI designer"
}
_LONG: Final = {a: tuple(tuple(f.split()) for f in forms) for a, forms in ABBREVIATIONS.items()}


def with_long_forms(words: Iterable[str]) -> frozenset[str]:
    """``words`` (stems as key terms compare them) plus, for each listed abbreviation among
    them, the words of its long forms, and each abbreviation whose long form they all hold."""
    out = set(words)
    for short, forms in _LONG.items():
        if short in out:
            out.update(w for form in forms for w in form)
        elif any(all(w in out for w in form) for form in forms):
            out.add(short)
    return frozenset(out)
