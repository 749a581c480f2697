"""Facts from model output: the fields of the ``memory_facts`` prompt template, validated.

The template (``prompts/memory_facts.txt``, overridable through ``Config.prompt_dir``) asks for
one JSON object per line with the keys of :data:`FIELDS`. :func:`parse_facts` keeps a line only
when it is exactly such an object: every key known, every value a string, a ``summary`` of at
least :data:`MIN_WORDS` words. Anything else (prose, a truncated object, a wrong key, a list)
is dropped and counted, never stored in part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .text import normalize

__all__ = ["FIELDS", "MIN_WORDS", "Extracted", "ParsedFacts", "parse_facts", "raw_turn_fact"]

FIELDS = ("summary", "datetime", "location", "participants", "item", "detail")
MIN_WORDS = 3


@dataclass(frozen=True)
class Extracted:
    """One valid fact: ``text`` to store, ``metadata`` (the non-empty fields, plus ``subject``
    when the fact names participants and an item: a newer fact about the same participants
    and item supersedes the older)."""

    text: str
    metadata: dict[str, str]


@dataclass
class ParsedFacts:
    """The valid facts of one output and how many candidate lines were malformed."""

    facts: list[Extracted] = field(default_factory=list)
    malformed: int = 0


def _fact(obj: object) -> Extracted | None:
    if not isinstance(obj, dict) or not obj or set(obj) - set(FIELDS):
        return None
    if not all(isinstance(v, str) for v in obj.values()):
        return None
    values = {k: " ".join(v.split()) for k, v in obj.items()}
    summary = values.get("summary", "")
    if len(normalize(summary).split()) < MIN_WORDS:
        return None
    detail = values.get("detail", "")
    text = summary if not detail or normalize(detail) in normalize(summary) else f"{summary} ({detail})"
    meta = {k: v for k, v in values.items() if v and k != "summary"}
    if meta.get("participants") and meta.get("item"):
        meta["subject"] = f"{meta['participants']} / {meta['item']}"
    return Extracted(text, meta)


def parse_facts(output: str) -> ParsedFacts:
    """The facts of a model's output (see the module docstring). A line counts as a candidate
    when it is not blank; each candidate is either one valid fact or one malformed line."""
    parsed = ParsedFacts()
    for line in output.splitlines():
        line = line.strip().rstrip(",")
        if not line:
            continue
        try:
            fact = _fact(json.loads(line))
        except ValueError:
            fact = None
        if fact is None:
            parsed.malformed += 1
        else:
            parsed.facts.append(fact)
    return parsed


def raw_turn_fact(text: str) -> Extracted | None:
    """The fallback that needs no extraction: the turn itself as a memory item (None when it
    has fewer than :data:`MIN_WORDS` words)."""
    text = " ".join(text.split())
    return Extracted(text, {"kind": "raw"}) if len(normalize(text).split()) >= MIN_WORDS else None
