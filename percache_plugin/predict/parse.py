"""Turn a model's free text into a clean list of questions."""

from __future__ import annotations

import re

__all__ = ["parse_questions"]

_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\(?\d+[.)]|Q\d*[:.])\s*", re.IGNORECASE)
_LEAD = re.compile(r"^[^?]*?:\s*[\"'\u201c]?(?=\S)")  # "The user could ask: "..."
_STARTS = re.compile(
    r"(?i)(what|when|who|whom|whose|which|why|how|where|did|does|do|is|are|was|were|can|could|"
    r"should|will|would|has|have|had)\b")


def _clean(raw: str) -> str:
    line = _BULLET.sub("", raw).strip()
    if not _STARTS.match(line):
        line = _LEAD.sub("", line, count=1)
    return line.strip().strip("\"'\u201c\u201d*").strip()


def parse_questions(text: str, *, limit: int, min_words: int = 3, max_words: int = 40) -> list[str]:
    """Questions in ``text``, one per line or sentence: bullets, numbering and lead-ins such as
    'The user could ask:' removed; a question must start like one (what, when, who, did ...);
    duplicates (case and punctuation aside) dropped; at most ``limit``."""
    out: list[str] = []
    seen: set[str] = set()
    for raw in re.split(r"[\n\r]+|(?<=\?)\s+", text):
        line = _clean(raw)
        if not _STARTS.match(line):
            continue
        line = line.split("?")[0].strip() + "?"
        if not min_words <= len(line.split()) <= max_words:
            continue
        key = re.sub(r"\W+", " ", line.lower()).strip()
        if key in seen:
            continue
        seen.add(key)
        out.append(line)
        if len(out) == limit:
            break
    return out
