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
``terms``
    (on unless ``key_terms=False``) the two questions name the same people, things and
    times. Key terms are words that look like names: capitalised words not opening a
    sentence ("Caroline", "Grad B", "Project Manager"), acronyms ("VAD"), words with
    digits ("2019"), plus time words ("yesterday", "week", "Monday", "March"); titles
    (Hon., Mr., Dr. ...) do not count. Every key term of each question must occur as a
    word of the other (case-insensitive, trailing plural "s" ignored; an abbreviation of
    :data:`~percache_plugin.rag.abbreviations.ABBREVIATIONS` and its long form count as
    one: "TV" / "television"). Embeddings score
    one-word swaps of a person or a time as near-identical (all-MiniLM-L6-v2: "What did
    Industrial Designer think of plastic ...?" vs "What did Marketing think of plastic
    ...?" 0.94; "What did David say about the tax return yesterday?" vs "... this
    morning?" above 0.86), and neither scope nor retrieval tells them apart; this guard
    does. It cannot see names typed in lower case.
``polarity``, ``antonym``, ``qtype``, ``object``, ``roles``
    (each on unless left out of ``meaning``) the two questions ask the same thing, not its
    opposite, another attribute of the same person and thing, or the same thing with two
    names trading places: see :mod:`percache_plugin.rag.meaning` and
    :mod:`percache_plugin.rag.roles`. The opt-in ones (``residue``, ``align``, ``combined``,
    ``joint``, ``lexical``, ``words``) are listed there too.
``fresh`` (rejection reason ``stale``)
    the entry is not stale (new chunks changed its retrieval since it was answered).
``answered`` (rejection reason ``no_answer``)
    the entry has an answer (prefill-only entries hold none yet).
``length``
    only when the caller passes the request's ``max_new_tokens``: greedy decoding with that
    cap gives the stored answer or its first tokens (see :mod:`percache_plugin.rag.qa_length`).
``consistency``
    only when the caller passes the chunk ids it retrieved for the new question: the
    share of the entry's source chunks that were retrieved again,
    ``|retrieved & sources| / |sources|``, is ``>= min_overlap``. With top-3 sources and
    ``min_overlap = 1/3`` one shared chunk suffices. An entry without sources (answered
    without retrieval) has nothing to contradict and passes with overlap 1.0.

``DEFAULT_TAU`` and ``DEFAULT_MIN_OVERLAP`` are calibrated for the default embedder
(all-MiniLM-L6-v2) on the QMSum evaluation in ``benchmarks/qa_eval.py``: with every
guard but the meaning guards on, tau 0.74 served 79% of 78 hand-written paraphrases and 0 of
435 hard negatives (the last false hit was at 0.68); the meaning guards cost 10 of those
points (69%, test split) and remove every opposite-meaning false hit of
``benchmarks/qa_meaning_eval.py``; top-3 retrieval with ``min_overlap = 1/3`` cost no
paraphrase hits there (2/3 cost 21 points). The paper's 0.85 is for Qwen3-Embedding;
another embedder has another similarity scale and needs its own calibration.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from percache_plugin.rag.abbreviations import with_long_forms
from percache_plugin.rag.meaning import DEFAULT_MEANING_GUARDS, MEANING_GUARDS
from percache_plugin.rag.wordnet import wordnet_dir

__all__ = [
    "DEFAULT_MEANING_GUARDS",
    "DEFAULT_MIN_OVERLAP",
    "MEANING_GUARDS",
    "DEFAULT_TAU",
    "REASONS",
    "QuestionTerms",
    "Verdict",
    "check_meaning",
    "check_min_overlap",
    "check_tau",
    "judge",
    "question_terms",
    "source_overlap",
    "term_stem",
    "terms_agree",
]

DEFAULT_TAU = 0.74
DEFAULT_MIN_OVERLAP = 1 / 3
# Every value LookupResult.rejected_by can take, in the order the guards are checked, and
# the key under which Verdict.guards reports each guard (True = passed).
REASONS = ("threshold", "scope", "terms", *MEANING_GUARDS, "stale", "no_answer", "length",
           "consistency")
_GUARD_KEY = MappingProxyType({"stale": "fresh", "no_answer": "answered"})
_TOKEN = re.compile(r"\w+|[.!?]")
_NOT_NAMES = frozenset("i hon right mr mrs ms dr prof sir dame st".split())
# Stems (see _stem) of time words; "may" and "march" double as verbs ("march" is kept).
_TIME_WORDS = frozenset(
    "yesterday today tonight tomorrow morning afternoon evening weekend week month quarter "
    "year holiday monday tuesday wednesday thursday friday saturday sunday january february "
    "march april june july august september october november december".split()
)


_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")


def term_stem(word: str) -> str:
    """A word as key terms are compared: case-folded, a trailing plural "s" dropped, an
    ordinal written in digits read as its number ("9th December" / "December 9")."""
    word = word.casefold()
    if ordinal := _ORDINAL.fullmatch(word):
        return ordinal.group(1)
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


_stem = term_stem


@dataclass(frozen=True)
class QuestionTerms:
    """The key terms of a question and all its words (both stemmed, see ``terms``); the words
    include the long form of each listed abbreviation and the other way round
    (:mod:`~percache_plugin.rag.abbreviations`: "TV" names "television")."""

    key: frozenset[str]
    words: frozenset[str]


def question_terms(question: str) -> QuestionTerms:
    """Split ``question`` into key terms and words for :func:`terms_agree`."""
    key: set[str] = set()
    words: set[str] = set()
    opening, previous = True, ""
    for token in _TOKEN.findall(question):
        if token in ".!?":
            # "Hon. Bill Blair": a period after a title does not open a sentence.
            opening = opening or token != "." or previous not in _NOT_NAMES
            continue
        stem = _stem(token)
        words.add(stem)
        named = (
            any(c.isdigit() for c in token)
            or (len(token) > 1 and token.isupper())
            or (token[0].isupper() and not opening)
            or stem in _TIME_WORDS
        )
        if named and stem not in _NOT_NAMES:
            key.add(stem)
        opening, previous = False, token.casefold()
    return QuestionTerms(frozenset(key), with_long_forms(words))


def terms_agree(a: QuestionTerms, b: QuestionTerms) -> bool:
    """True when each question's key terms all occur among the other's words."""
    return a.key <= b.words and b.key <= a.words


def check_tau(tau: object) -> float:
    """``tau`` as a float in [-1, 1] (the range of a cosine), else ValueError."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not -1.0 <= tau <= 1.0:
        raise ValueError(f"tau (similarity threshold) must be a number in [-1, 1], got {tau!r}")
    return float(tau)


def check_meaning(meaning: object) -> frozenset[str]:
    """``meaning`` as a set of meaning-guard names, else ValueError naming the unknown one
    (:class:`~percache_plugin.rag.wordnet.WordNetMissing` for ``lexical`` without the
    WordNet files)."""
    if isinstance(meaning, str) or not isinstance(meaning, Collection):
        raise TypeError(f"meaning must be a collection of guard names, got {meaning!r}")
    unknown = [m for m in meaning if m not in MEANING_GUARDS]
    if unknown:
        raise ValueError(f"unknown meaning guard {unknown[0]!r}; known: {MEANING_GUARDS}")
    if "lexical" in meaning:
        wordnet_dir()  # WordNetMissing (an ImportError) naming the install command
    return frozenset(meaning)


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
    guard, or ``None`` when the candidate may be served. ``off_failed``: the meaning guards
    that were switched off and would have refused the candidate (reported in the QA bank's
    stats when it is served, so switching a guard off is never silent).
    """

    guards: Mapping[str, bool | float]
    rejected_by: str | None
    off_failed: tuple[str, ...] = ()


def judge(
    similarity: float,
    *,
    tau: float,
    stale: bool,
    answered: bool,
    sources: Collection[str],
    retrieved: Collection[str] | None,
    min_overlap: float,
    terms: bool | None = None,
    meaning: Mapping[str, bool] | None = None,
    off_failed: Collection[str] = (),
    length: bool | None = None,
) -> Verdict:
    """Run every guard on one in-scope candidate (see the module docstring).

    :param terms: result of :func:`terms_agree` for the two questions; ``None``: the
        key-terms guard is off.
    :param meaning: results of the meaning guards that ran (``meaning.meaning_checks``).
    :param off_failed: meaning guards switched off that the candidate fails (reported only).
    :param length: whether the answer serves the request's length cap; ``None``: no cap given.
    """
    guards: dict[str, bool | float] = {
        "threshold": bool(similarity >= tau),
        "scope": True,  # candidates come from the question's own scope only
        "fresh": not stale,
        "answered": bool(answered),
    }
    if terms is not None:
        guards["terms"] = bool(terms)
    for name, passed in (meaning or {}).items():
        guards[name] = bool(passed)
    if length is not None:
        guards["length"] = bool(length)
    if retrieved is not None:
        overlap = source_overlap(retrieved, sources)
        guards["overlap"] = overlap
        guards["consistency"] = bool(overlap >= min_overlap)
    failed = next((r for r in REASONS if guards.get(_GUARD_KEY.get(r, r)) is False), None)
    return Verdict(MappingProxyType(guards), failed, tuple(off_failed))
