"""Judging a lookup's candidates: every guard, in order of similarity."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from percache_plugin.rag.embeddings import Embedder
from percache_plugin.rag.guards import Verdict, judge, question_terms, terms_agree
from percache_plugin.rag.meaning import MEANING_GUARDS, meaning_checks, question_shape
from percache_plugin.rag.qa_embedded import EMBEDDED_GUARDS, embedded_verdicts
from percache_plugin.rag.qa_length import serves
from percache_plugin.rag.qa_memory import Slot

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
    embedded: Mapping[int, Mapping[str, bool] | None] | None = None,
    embedder: Embedder | None = None,
    cap: int | None = None,
) -> tuple[list[Judged], Judged | None]:
    """Judge ``candidates`` (``(id, cosine)``, best first) until one passes every guard or
    the similarity falls below ``tau``. Returns every verdict and the one served, if any.
    Every meaning guard is computed; those not in ``meaning`` only report (``off_failed``).
    The guards that need the embedder (``residue``, ``align``, ``combined``, ``joint``) run only when ``embedded`` is
    given (their verdicts, computed beforehand by the caller, per entry id; None where they
    do not decide: the candidate fails another guard) and only for candidates reaching
    ``tau``; a candidate missing from it (added since) is judged with ``embedder``. ``cap``:
    the request's ``max_new_tokens`` (the ``length`` guard; ``None``: off)."""
    terms = question_terms(question) if key_terms else None
    shape = question_shape(question)
    judged: list[Judged] = []
    for entry_id, sim in candidates:
        slot = slots[entry_id]
        checks = meaning_checks(shape, slot.shape, MEANING_GUARDS)
        if embedded is not None and sim >= tau:
            if entry_id not in embedded:
                if embedder is not None:
                    checks.update(embedded_verdicts(question, [(slot.info.question, slot.shape,
                                                                sim)], EMBEDDED_GUARDS,
                                                    embedder)[0])
            elif (known := embedded[entry_id]) is not None:
                checks.update(known)
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
            length=None if cap is None else serves(slot.info.length, slot.info.ended, cap),
        )
        judged.append((entry_id, sim, verdict))
        if verdict.rejected_by is None:
            return judged, judged[-1]
        if sim < tau:
            break
    return judged, None
