"""Guards: may a QA-bank candidate be served for a new question?

A semantic cache that only thresholds cosine similarity returns wrong answers for
near-identical questions about different things ("When did Caroline ...?" vs "When did
Melanie ...?", "Summarize the whole meeting." for two meetings). The QA bank therefore
serves a stored answer only when every guard passes, checked in this order (the first
failure is the rejection reason):

``threshold``
    cosine similarity of the two questions ``>= tau``.
``scope``
    the stored entry's scope equals the question's scope (``None`` matches only
    ``None``). The bank enforces this by searching only the question's own scope, so
    entries of another scope (user, meeting, thread) are never even candidates.
``fresh``
    the entry is not stale (new chunks changed its retrieval since it was answered).
``answered``
    the entry has an answer (prefill-only entries hold none yet).
``consistency``
    only when the caller passes the chunk ids it retrieved for the new question: the
    share of the entry's source chunks that were retrieved again,
    ``|retrieved & sources| / |sources|``, is ``>= min_overlap``. With top-3 sources and
    ``min_overlap = 1/3`` one shared chunk suffices. An entry without sources (answered
    without retrieval) has nothing to contradict and passes with overlap 1.0.

``DEFAULT_TAU`` and ``DEFAULT_MIN_OVERLAP`` are calibrated for the default embedder
(all-MiniLM-L6-v2) on the QMSum evaluation in ``benchmarks/qa_eval.py``; another
embedder has another similarity scale and needs its own calibration.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "DEFAULT_MIN_OVERLAP",
    "DEFAULT_TAU",
    "REASONS",
    "Verdict",
    "check_min_overlap",
    "check_tau",
    "judge",
    "source_overlap",
]

DEFAULT_TAU = 0.80
DEFAULT_MIN_OVERLAP = 1 / 3
# Every value LookupResult.rejected_by can take, in the order the guards are checked.
REASONS = ("threshold", "scope", "fresh", "answered", "consistency")


def check_tau(tau: object) -> float:
    """``tau`` as a float in [-1, 1] (the range of a cosine), else ValueError."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not -1.0 <= tau <= 1.0:
        raise ValueError(f"tau (similarity threshold) must be a number in [-1, 1], got {tau!r}")
    return float(tau)


def check_min_overlap(min_overlap: object) -> float:
    """``min_overlap`` as a float in [0, 1], else ValueError."""
    if (
        isinstance(min_overlap, bool)
        or not isinstance(min_overlap, (int, float))
        or not 0.0 <= min_overlap <= 1.0
    ):
        raise ValueError(f"min_overlap must be a number in [0, 1], got {min_overlap!r}")
    return float(min_overlap)


def source_overlap(retrieved: Collection[str], sources: Collection[str]) -> float:
    """Share of ``sources`` found in ``retrieved``; 1.0 when there are no sources."""
    if not sources:
        return 1.0
    wanted = set(sources)
    return len(wanted & set(retrieved)) / len(wanted)


@dataclass(frozen=True)
class Verdict:
    """Outcome of the guards for one candidate.

    ``guards`` maps each guard checked to whether it passed, plus ``"overlap"`` (the
    consistency value) when retrieval was given; ``rejected_by`` is the first failed
    guard, or ``None`` when the candidate may be served.
    """

    guards: Mapping[str, bool | float]
    rejected_by: str | None


def judge(
    similarity: float,
    *,
    tau: float,
    stale: bool,
    answered: bool,
    sources: Collection[str],
    retrieved: Collection[str] | None,
    min_overlap: float,
) -> Verdict:
    """Run every guard on one in-scope candidate (see the module docstring)."""
    guards: dict[str, bool | float] = {
        "threshold": bool(similarity >= tau),
        "scope": True,  # candidates come from the question's own scope only
        "fresh": not stale,
        "answered": bool(answered),
    }
    if retrieved is not None:
        overlap = source_overlap(retrieved, sources)
        guards["overlap"] = overlap
        guards["consistency"] = bool(overlap >= min_overlap)
    failed = next((r for r in REASONS if guards.get(r) is False), None)
    return Verdict(MappingProxyType(guards), failed)
