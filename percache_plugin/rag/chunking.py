"""Documents and chunks: validation, stable ids, and size-bounded splitting.

A chunk is the unit the knowledge bank retrieves and whose K/V it caches, so its id must
be stable across runs and processes: it is a hash of ``(scope, text)``. The same text in
the same scope is therefore one chunk, whichever document it came from; the same text in
two scopes (two users) stays two chunks, so nothing is shared across scopes by accident.

Splitting keeps natural units whole: dialogue turns for transcripts ("Speaker: text"
lines), sentences otherwise. Units are packed greedily to about ``target_words``; a unit
longer than ``max_words`` is split at sentence boundaries first, then at word boundaries.
Chunk texts are verbatim slices of the document text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

__all__ = [
    "Chunk",
    "Document",
    "Units",
    "as_document",
    "chunk_document",
    "chunk_id",
    "split_spans",
]

Units = Literal["auto", "turns", "sentences"]

# "Speaker: text" or "Speaker:" alone; labels in real transcripts run to ~100 characters
# ("Hon. Mary Ng (Minister of Small Business, ...)"), so only the colon shape is checked.
_SPEAKER_LINE = re.compile(r"[^\W\d_][^:\n]{0,119}:(?:\s|$)")
_MAX_LABEL_WORDS = 16
# A sentence ends at . ! ? (optionally closed by quotes/brackets) followed by whitespace.
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_WORD = re.compile(r"\S+")

Span = tuple[int, int]


def _frozen_metadata(metadata: object, owner: str) -> Mapping[str, str]:
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"{owner}: metadata must be a mapping of str to str, got {type(metadata).__name__}"
        )
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"{owner}: metadata must map str to str, got {key!r}: {value!r}")
    return MappingProxyType(dict(metadata))


def _digest(*parts: str | None) -> str:
    # JSON keeps (None, "a") and ("", "a") apart, unlike plain concatenation.
    return hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()[:24]


def chunk_id(text: str, scope: str | None) -> str:
    """Stable id of a chunk: the same text in the same scope always gets the same id."""
    return "c-" + _digest(scope, text)


@dataclass(frozen=True)
class Document:
    """A text to index. ``text`` may be given as UTF-8 ``bytes``; it is decoded strictly.

    Without an ``id``, the id is a hash of ``(scope, text)``, so re-adding the same
    document is idempotent.
    """

    text: str
    id: str | None = None
    scope: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        name = f"document {self.id!r}" if self.id is not None else "unnamed document"
        text: object = self.text
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8", errors="strict")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{name} is not valid UTF-8 (byte {exc.start}: {exc.reason}); decode it first"
                ) from exc
        if not isinstance(text, str):
            raise TypeError(f"{name}: text must be str or UTF-8 bytes, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"{name} has empty text")
        if self.id is not None and (not isinstance(self.id, str) or not self.id):
            raise ValueError(f"document id must be a non-empty str or None, got {self.id!r}")
        if self.scope is not None and not isinstance(self.scope, str):
            raise TypeError(f"{name}: scope must be str or None, got {type(self.scope).__name__}")
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "metadata", _frozen_metadata(self.metadata, name))
        if self.id is None:
            object.__setattr__(self, "id", "d-" + _digest(self.scope, text))


@dataclass(frozen=True)
class Chunk:
    """A retrievable slice of a document; ``index`` is its position within the document."""

    id: str
    doc_id: str
    index: int
    text: str
    scope: str | None
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", _frozen_metadata(self.metadata, f"chunk {self.id!r}"))


_DOCUMENT_KEYS = frozenset({"text", "id", "scope", "metadata"})


def as_document(obj: str | bytes | Mapping[str, object] | Document) -> Document:
    """Coerce user input to a :class:`Document`.

    Accepts a ``Document``, a ``str``, UTF-8 ``bytes`` or a mapping with ``text`` and
    optionally ``id``, ``scope`` and ``metadata`` (other keys are rejected, not ignored,
    so a misspelt ``scope`` cannot silently put a document in the shared scope).
    """
    if isinstance(obj, Document):
        return obj
    if isinstance(obj, (str, bytes, bytearray)):
        return Document(text=obj)  # type: ignore[arg-type]  # bytes are decoded in __post_init__
    if isinstance(obj, Mapping):
        unknown = set(obj) - _DOCUMENT_KEYS
        if unknown:
            raise ValueError(
                f"document mapping has unknown keys {sorted(map(str, unknown))}; "
                f"allowed: {sorted(_DOCUMENT_KEYS)}"
            )
        if "text" not in obj:
            raise ValueError(f"document mapping needs a 'text' key (id={obj.get('id')!r})")
        return Document(
            text=obj["text"],  # type: ignore[arg-type]
            id=obj.get("id"),  # type: ignore[arg-type]
            scope=obj.get("scope"),  # type: ignore[arg-type]
            metadata=obj.get("metadata") or {},  # type: ignore[arg-type]
        )
    raise TypeError(
        f"cannot make a document from {type(obj).__name__}; pass str, bytes, mapping or Document"
    )


def _is_speaker_line(line: str) -> bool:
    match = _SPEAKER_LINE.match(line)
    return match is not None and len(match.group().split()) <= _MAX_LABEL_WORDS


def _looks_like_transcript(text: str) -> bool:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    speakers = sum(_is_speaker_line(line) for line in lines)
    return speakers >= 2 and speakers * 2 >= len(lines)


def _trim(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _turn_spans(text: str) -> list[Span]:
    """One span per speaker line; lines without a speaker continue the previous turn."""
    starts: list[int] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        if _is_speaker_line(line.lstrip()) or not starts:
            starts.append(offset)
        offset += len(line)
    bounds = zip(starts, starts[1:] + [len(text)], strict=True)
    return [span for s, e in bounds if (span := _trim(text, s, e)) is not None]


def _sentence_spans(text: str, start: int, end: int) -> list[Span]:
    cuts = [start]
    for pattern in (_PARAGRAPH_BREAK, _SENTENCE_END):
        cuts += [m.end() for m in pattern.finditer(text, start, end)]
    cuts = sorted(set(cuts)) + [end]
    return [
        span
        for s, e in zip(cuts, cuts[1:], strict=False)
        if (span := _trim(text, s, e)) is not None
    ]


def _word_count(text: str, span: Span) -> int:
    return sum(1 for _ in _WORD.finditer(text, span[0], span[1]))


def _split_words(text: str, span: Span, target_words: int) -> list[Span]:
    """Balanced pieces of at most ``target_words`` words, cut at word boundaries."""
    words = [m.span() for m in _WORD.finditer(text, span[0], span[1])]
    pieces = -(-len(words) // target_words)
    size = -(-len(words) // pieces)
    return [
        (words[i][0], words[min(i + size, len(words)) - 1][1]) for i in range(0, len(words), size)
    ]


def _pack(text: str, units: list[Span], target_words: int, max_words: int) -> list[Span]:
    """Greedy packing: close a chunk when adding the next unit would overshoot the target
    by more than the chunk currently falls short of it, or would exceed ``max_words``."""
    chunks: list[Span] = []
    current: Span | None = None
    words = 0
    for unit in units:
        n = _word_count(text, unit)
        if current is not None and (
            words + n > max_words or words + n - target_words > target_words - words
        ):
            chunks.append(current)
            current = None
        if current is None:
            current, words = unit, n
        else:
            current, words = (current[0], unit[1]), words + n
    if current is not None:
        chunks.append(current)
    return chunks


def _bounded(
    text: str, span: Span, target_words: int, max_words: int, sentences: bool
) -> list[Span]:
    if _word_count(text, span) <= max_words:
        return [span]
    if sentences:
        parts = _sentence_spans(text, *span)
        if len(parts) > 1:
            pieces = [
                p for part in parts for p in _bounded(text, part, target_words, max_words, False)
            ]
            return _pack(text, pieces, target_words, max_words)
    return _split_words(text, span, target_words)


def split_spans(
    text: str, *, target_words: int = 100, max_words: int | None = None, units: Units = "auto"
) -> list[Span]:
    """Character spans ``[start, end)`` of the chunks of ``text``, in order.

    :param target_words: packed chunks aim at this many whitespace-separated words.
    :param max_words: no chunk is longer; default ``2 * target_words``.
    :param units: ``"turns"`` (one unit per "Speaker:" line), ``"sentences"``, or
        ``"auto"`` (turns when most non-empty lines start with a speaker label).
    """
    if isinstance(target_words, bool) or not isinstance(target_words, int) or target_words < 1:
        raise ValueError(f"target_words must be a positive int, got {target_words!r}")
    max_words = 2 * target_words if max_words is None else max_words
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < target_words:
        raise ValueError(
            f"max_words must be an int >= target_words ({target_words}), got {max_words!r}"
        )
    if units not in ("auto", "turns", "sentences"):
        raise ValueError(f"units must be 'auto', 'turns' or 'sentences', got {units!r}")
    if units == "auto":
        units = "turns" if _looks_like_transcript(text) else "sentences"
    base = _turn_spans(text) if units == "turns" else _sentence_spans(text, 0, len(text))
    pieces = [
        p for span in base for p in _bounded(text, span, target_words, max_words, units == "turns")
    ]
    return _pack(text, pieces, target_words, max_words)


def chunk_document(
    doc: Document, *, target_words: int = 100, max_words: int | None = None, units: Units = "auto"
) -> list[Chunk]:
    """Split ``doc`` into chunks (see :func:`split_spans`); each inherits the document's
    scope and metadata. Identical texts in one scope share an id; the index keeps one."""
    if not isinstance(doc, Document):
        raise TypeError(
            f"chunk_document needs a Document, got {type(doc).__name__}; use as_document()"
        )
    assert doc.id is not None  # set in Document.__post_init__
    spans = split_spans(doc.text, target_words=target_words, max_words=max_words, units=units)
    return [
        Chunk(
            id=chunk_id(doc.text[s:e], doc.scope),
            doc_id=doc.id,
            index=i,
            text=doc.text[s:e],
            scope=doc.scope,
            metadata=doc.metadata,
        )
        for i, (s, e) in enumerate(spans)
    ]
