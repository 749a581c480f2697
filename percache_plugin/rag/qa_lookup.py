"""Judging a lookup's candidates: every guard, in order of similarity."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from percache_plugin.rag.guards import Verdict, judge, question_terms, terms_agree
from percache_plugin.rag.meaning import MEANING_GUARDS, meaning_checks, question_shape
from percache_plugin.rag.qa_memory import Slot
from percache_plugin.rag.residue import Embed, residue_agrees

__all__ = ["Judged", "judge_candidates"]


Judged = tuple[int, float, Verdict]


def judge_candidates(
    question: str,
    candidates: Sequence[tuple[int, float]],
    slots: Mapping[int, Slot],
    *,
    tau: float,
    retrieved: Collection[str] | None,
    min_overlap: float,
    key_terms: bool,
    meaning: Collection[str],
    residue: Mapping[int, bool | None] | None = None,
    embed: Embed | None = None,
) -> tuple[list[Judged], Judged | None]:
    """Judge ``candidates`` (``(id, cosine)``, best first) until one passes every guard or
    the similarity falls below ``tau``. Returns every verdict and the one served, if any.
    Every meaning guard is computed; those not in ``meaning`` only report (``off_failed``).
    The ``residue`` guard runs only when ``residue`` is given (its verdicts, computed
    beforehand by the caller, per entry id; None where it does not decide: the candidate
    fails another guard) and only for candidates reaching ``tau``; a candidate missing from
    it (added since) is judged with ``embed``."""
    terms = question_terms(question) if key_terms else None
    shape = question_shape(question)
    judged: list[Judged] = []
    for entry_id, sim in candidates:
        slot = slots[entry_id]
        checks = meaning_checks(shape, slot.shape, MEANING_GUARDS)
        if residue is not None and sim >= tau:
            if entry_id not in residue:
                if embed is not None:
                    checks["residue"] = residue_agrees(shape, slot.shape, embed, sim)
            elif (known := residue[entry_id]) is not None:
                checks["residue"] = known
        verdict = judge(
            sim,
            tau=tau,
            stale=slot.stale,
            answered=slot.info.answered,
            sources=slot.info.sources,
            retrieved=retrieved,
            min_overlap=min_overlap,
            terms=None if terms is None else terms_agree(terms, slot.terms),
            meaning={g: ok for g, ok in checks.items() if g in meaning},
            off_failed=[g for g, ok in checks.items() if not ok and g not in meaning],
        )
        judged.append((entry_id, sim, verdict))
        if verdict.rejected_by is None:
            return judged, judged[-1]
        if sim < tau:
            break
    return judged, None
