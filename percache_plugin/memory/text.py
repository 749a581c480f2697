"""Text keys of facts: the normalised form used for exact de-duplication and subjects."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize", "subject_key"]

_WORD = re.compile(r"\w+")


def normalize(text: str) -> str:
    """Lower-cased NFKC words joined by one space: ``"Alice  likes TEA."`` and
    ``"alice likes tea"`` are the same fact."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).lower()))


def subject_key(subject: str | None) -> str | None:
    """The normalised subject (None when absent or empty): facts with the same key are about
    the same thing, and the newer one supersedes the older."""
    if subject is None:
        return None
    key = normalize(subject)
    return key or None
