"""Text keys of facts: the normalised form used for exact de-duplication and subjects, and the
text a fact is indexed under."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

__all__ = ["CONTEXT", "key_text", "normalize", "subject_key"]

CONTEXT = "context"  # metadata key: the text a fact is indexed with besides its own

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


def key_text(text: str, metadata: Mapping[str, str]) -> str:
    """What a fact is indexed under: its text, followed by its retrieval context (the turn it
    was extracted from, ``metadata["context"]``) when it has one."""
    context = metadata.get(CONTEXT, "")
    return f"{text}\n{context}" if context else text
