"""Is a generated answer supported by the chunks it was generated from?

A small model can answer against its own source: the demo's note says "The choir rehearsal
moved from Thursday to Friday" and SmolLM2 answered "Thursday at 6 pm". Stored in the QA
bank, such an answer would be served to every paraphrase. :func:`check_grounding` looks at the
answer's key facts (numbers and times, weekdays and months, capitalized names that do not start
a sentence, only when asked) and flags

- an **unsupported** fact: it occurs in none of the sources;
- a **superseded** fact: a source changes it ("moved from Thursday to Friday", "Friday instead
  of Thursday") and the answer names the old value but not the new one.

It is a lexical check, not an entailment model: it cannot see a wrong answer built only from
words of the sources, and paraphrased facts ("twelve" for "12") count as unsupported. Its rate
of false flags on reference answers is measured by ``benchmarks/grounding_eval.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Grounding", "check_grounding", "key_facts", "superseded_values"]

_FACT = re.compile(r"\b(?:\d[\w:.%/-]*|(?<![.!?]\s)(?<!^)[A-Z][a-zA-Z]+)")
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
# "may" is a month only when capitalized (and even then may start a sentence: see _CALENDAR use).
_CALENDAR = re.compile(r"\b(?:(?i:" + "|".join(m for m in _DAYS + _MONTHS if m != "may") + r")s?|May)\b")
_NUMERIC = re.compile(r"(?<![\w.])\d+(?:[.,:]\d+)*(?:[a-zA-Z%]+)?")
_NUMBER = re.compile(r"\d+(?:[.:,]\d+)*")

_VALUE = r"((?i:" + "|".join(_DAYS + _MONTHS) + r")|[A-Z][a-z]+|\d[\w:.%/-]*)"
_CHANGE = re.compile(
    r"\b(?i:moved|changed|postponed|rescheduled|pushed|shifted|switched|delayed|brought|updated|"
    r"corrected|revised|raised|lowered|increased|decreased|cut|reduced|rose|fell|went)\b"
    r"(?:\W+\w+){0,4}?\W+(?i:from)\s+" + _VALUE + r"\s+(?i:to)\s+" + _VALUE)
_INSTEAD = re.compile(_VALUE + r"\s+(?i:instead\s+of)\s+" + _VALUE)
_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
# Common capitalized words that are no names (a sentence may start after a colon or a quote).
_STOP = frozenset({"i", "the", "a", "an", "he", "she", "it", "they", "we", "you", "this", "that",
                   "there", "yes", "no", "not", "and", "but", "or", "so", "in", "on", "at"})


def key_facts(text: str) -> set[str]:
    """Numbers, times, weekdays and capitalized names (not sentence starts) in ``text``,
    lower-cased."""
    facts = {m.group(0).lower().rstrip(".") for m in _FACT.finditer(text.strip())}
    facts.update(d for d in _DAYS if d in text.lower())
    return facts


def _answer_facts(text: str, names: bool) -> set[str]:
    facts = {m.group(0).lower() for m in _NUMERIC.finditer(text)}
    facts.update(m.group(0).lower() for m in _CALENDAR.finditer(text)
                 if not (m.group(0) == "May" and re.search(r"(^|[.!?]\s+)$", text[:m.start()])))
    if names:
        facts.update(f for f in key_facts(text) if f not in _STOP and not f[0].isdigit())
    return facts


def _core(fact: str) -> str:
    """What must occur in a source: a number's digits ("6pm" -> "6", "14th" -> "14"), a
    word without a plural or possessive ending."""
    number = _NUMBER.match(fact)
    if number is not None:
        return number.group(0)
    for end in ("'s", "’s", "s"):
        if fact.endswith(end) and len(fact) > len(end) + 2:
            return fact[: -len(end)]
    return fact


def _number_words(n: int) -> str | None:
    """``n`` in words for ``0 <= n < 100`` ("thirty two"), None otherwise."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    return None


def _occurs(fact: str, text: str) -> bool:
    core = _core(fact)
    if core[0].isdigit():
        if re.search(r"(?<![\d.,:])" + re.escape(core) + r"(?![\d])", text) is not None:
            return True
        words = _number_words(int(core)) if core.isdigit() else None  # spoken transcripts
        return words is not None and re.search(
            r"\b" + words.replace(" ", r"[\s-]") + r"\b", text) is not None
    return re.search(r"\b" + re.escape(core) + r"(?:s|'s|’s)?\b", text) is not None


def superseded_values(source: str) -> list[tuple[str, str]]:
    """``(old, new)`` values a source says were changed: "moved from X to Y" (after a verb of
    change), "Y instead of X"; lower-cased."""
    pairs = [(m.group(1).lower(), m.group(2).lower().rstrip(".,;")) for m in _CHANGE.finditer(source)]
    pairs += [(m.group(2).lower().rstrip(".,;"), m.group(1).lower()) for m in _INSTEAD.finditer(source)]
    return [(old, new) for old, new in pairs if old != new]


@dataclass(frozen=True)
class Grounding:
    """The outcome of :func:`check_grounding`.

    :ivar facts: the answer's key facts that were checked.
    :ivar unsupported: facts found in no source.
    :ivar superseded: ``(old, new)``: the answer names ``old``, which a source changed to
        ``new``, and does not name ``new``.
    """

    facts: tuple[str, ...]
    unsupported: tuple[str, ...]
    superseded: tuple[tuple[str, str], ...]

    @property
    def flagged(self) -> bool:
        return bool(self.unsupported or self.superseded)

    def reasons(self) -> tuple[str, ...]:
        """One phrase per problem, e.g. ``"'thursday' (the sources changed it to 'friday')"``."""
        out = [f"'{f}' (in no source)" for f in self.unsupported]
        out += [f"'{old}' (the sources changed it to '{new}')" for old, new in self.superseded]
        return tuple(out)


def check_grounding(answer: str, sources: Sequence[str], *, names: bool = False) -> Grounding:
    """Check ``answer``'s key facts against the texts it was generated from (see the module
    docstring): numbers, times, weekdays and months; with ``names``, capitalized names too
    (reference answers name many things their sources do not: see the benchmark). An answer
    with no key facts, or with no sources, is not flagged."""
    if not sources or not answer.strip():
        return Grounding((), (), ())
    facts = sorted(_answer_facts(answer, names))
    text = "\n".join(sources).lower()
    unsupported = tuple(f for f in facts if not _occurs(f, text))
    lowered = answer.lower()
    superseded = []
    for source in sources:
        for old, new in superseded_values(source):
            if not names and not (old[0].isdigit() or _CALENDAR.fullmatch(old.capitalize())):
                continue
            if _occurs(old, lowered) and not _occurs(new, lowered):
                superseded.append((old, new))
    return Grounding(tuple(facts), unsupported, tuple(dict.fromkeys(superseded)))
