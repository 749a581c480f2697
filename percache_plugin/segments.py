"""Prompts as segments: each reusable segment is tokenized on its own.

The prompt's token ids are the concatenation of the segments' ids, so a cached and an uncached
run see the same ids (no BPE drift at chunk boundaries). With a chat template, the rendered
template is split at sentinel strings so its glue text is attached to the segment that follows it.
"""

from __future__ import annotations

import array
import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Segment", "PromptPiece", "Prompt", "SegmentError", "normalize_segments", "build_prompt",
           "chain_pieces", "node_key", "scope_root", "scoped"]

SegmentKind = Literal["system", "chunk", "query"]
_SENTINEL = "\u2063PERCACHE-SEGMENT-{}\u2063"


class SegmentError(ValueError):
    """The segment list is malformed; the message names the offending segment."""


@dataclass(frozen=True)
class Segment:
    """One part of a prompt.

    :param text: the segment's text.
    :param kind: ``"system"`` (first, reusable), ``"chunk"`` (reusable) or ``"query"`` (last, never cached).
    :param id: an optional caller id (for example a knowledge-bank chunk id), carried into stats.
    """

    text: str
    kind: SegmentKind = "chunk"
    id: str | None = None

    @property
    def reusable(self) -> bool:
        return self.kind != "query"


@dataclass(frozen=True)
class PromptPiece:
    """A segment after tokenization: its ids, its span in the prompt and its tree key."""

    segment: Segment
    token_ids: tuple[int, ...]
    start: int
    key: str | None  # None for the query, which is never cached

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class Prompt:
    """The pieces of a prompt. ``scope``: the scope whose key chain the keys start from
    (:func:`scoped`), None for an unscoped prompt (keys rooted at the fingerprint alone)."""

    pieces: tuple[PromptPiece, ...]
    scope: str | None = None

    @property
    def input_ids(self) -> list[int]:
        return [t for p in self.pieces for t in p.token_ids]

    @property
    def n_tokens(self) -> int:
        return self.pieces[-1].end if self.pieces else 0

    @property
    def reusable(self) -> tuple[PromptPiece, ...]:
        return tuple(p for p in self.pieces if p.key is not None)


def normalize_segments(segments: Sequence[str | Segment]) -> list[Segment]:
    """Plain strings follow the convention [system, chunk, ..., query]; a single string is the query."""
    if isinstance(segments, (str, bytes)) or not isinstance(segments, Sequence):
        raise SegmentError(
            f"segments must be a list of str or Segment, got {type(segments).__name__}"
        )
    if len(segments) == 0:
        raise SegmentError("segments is empty: give at least a query")
    out: list[Segment] = []
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if isinstance(seg, Segment):
            if not isinstance(seg.text, str):
                raise SegmentError(f"segment {i}: text must be str, got {type(seg.text).__name__}")
            out.append(seg)
        elif isinstance(seg, str):
            kind: SegmentKind = "query" if i == last else ("system" if i == 0 else "chunk")
            out.append(Segment(seg, kind))
        else:
            raise SegmentError(f"segment {i} is a {type(seg).__name__}, expected str or Segment")
    kinds = [s.kind for s in out]
    if "query" in kinds[:-1]:
        raise SegmentError(f"only the last segment may be the query, got kinds {kinds}")
    if "system" in kinds[1:]:
        raise SegmentError(f"only the first segment may be the system prompt, got kinds {kinds}")
    for i, s in enumerate(out):
        if s.kind not in ("system", "chunk", "query"):
            raise SegmentError(f"segment {i}: unknown kind {s.kind!r}")
    return out


def node_key(fingerprint: str, parent: str | None, token_ids: Sequence[int]) -> str:
    """Key of a prefix-tree node: the model, the whole path before it, and its own ids."""
    h = hashlib.blake2b(digest_size=16)
    h.update(fingerprint.encode())
    h.update((parent or "root").encode())
    h.update(len(token_ids).to_bytes(4, "little"))
    h.update(_uint32_le(token_ids))
    return h.hexdigest()


def scope_root(fingerprint: str, scope: str | None) -> str:
    """The root of a key chain: the fingerprint for unscoped prompts; the fingerprint and the
    scope for a scope's, so no scope's keys (and what they reveal through reuse) meet another's."""
    return fingerprint if scope is None else f"{fingerprint}\x00scope:{scope}"


def scoped(prompt: Prompt, fingerprint: str, scope: str | None) -> Prompt:
    """``prompt`` with its keys chained again from ``scope_root(fingerprint, scope)`` (any
    prompt builder's pieces: ids, spans and which pieces are cached stay as they are);
    ``prompt`` itself when ``scope`` is None."""
    if scope is None:
        return prompt
    root = scope_root(fingerprint, scope)
    pieces: list[PromptPiece] = []
    parent: str | None = None
    for piece in prompt.pieces:
        key = None
        if piece.key is not None:
            key = parent = node_key(root, parent, piece.token_ids)
        pieces.append(PromptPiece(piece.segment, piece.token_ids, piece.start, key))
    return Prompt(tuple(pieces), scope)


def _uint32_le(token_ids: Sequence[int]) -> bytes:
    """The ids as unsigned 32-bit little-endian bytes, in one pass (a per-token ``to_bytes``
    took ~2 ms on a 2,000-token prompt, paid by every request); an id outside [0, 2**32)
    raises OverflowError as ``int(t).to_bytes(4, "little")`` does."""
    if array.array("I").itemsize != 4:  # no 32-bit C unsigned int here
        return b"".join(int(t).to_bytes(4, "little") for t in token_ids)
    try:
        buf = array.array("I", token_ids)
    except TypeError:  # ids that are not ints but convert to one (as int() accepts)
        buf = array.array("I", [int(t) for t in token_ids])
    if sys.byteorder == "big":
        buf.byteswap()
    return buf.tobytes()


def _texts(segments: list[Segment], tokenizer: Any, use_template: bool, separator: str) -> list[str]:
    """The text of each segment, with the template's glue attached so chunks stay pure.

    Glue before a chunk (e.g. the end of the system turn and the start of the user turn) ends
    the previous piece, so a chunk's tokens do not depend on where it stands and it can be
    reused at another position; glue before the query and after it belongs to the query."""
    bodies = [s.text + separator if s.kind == "chunk" else s.text for s in segments]
    if not use_template:
        # Plain layout: system and chunks end with the separator; the query stands last.
        return [b + separator if s.kind == "system" else b for s, b in zip(segments, bodies, strict=True)]
    marks = [_SENTINEL.format(i) for i in range(len(segments))]
    messages = []
    start = 0
    if segments[0].kind == "system":
        messages.append({"role": "system", "content": marks[0]})
        start = 1
    messages.append({"role": "user", "content": "".join(marks[start:])})
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    texts: list[str] = []
    rest = rendered
    for i, mark in enumerate(marks):
        glue, found, rest = rest.partition(mark)
        if not found:
            raise SegmentError(f"chat template dropped segment {i}; render without it (chat_template=False)")
        if i > 0 and segments[i].kind == "chunk":
            texts[-1] += glue
            texts.append(bodies[i])
        else:
            texts.append(glue + bodies[i])
    texts[-1] += rest
    return texts


def build_prompt(
    segments: list[Segment],
    tokenizer: Any,
    *,
    fingerprint: str,
    use_template: bool,
    separator: str = "\n\n",
) -> Prompt:
    """Tokenize every segment on its own and chain the reusable ones into tree keys."""
    texts = _texts(segments, tokenizer, use_template, separator)
    prefix_ids: list[int] = []
    if not use_template:
        # BOS (if the tokenizer adds one) belongs to the first segment.
        prefix_ids = list(tokenizer("", add_special_tokens=True)["input_ids"])
    ids = [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]
    ids[0] = prefix_ids + ids[0]
    return chain_pieces(segments, ids, fingerprint=fingerprint)


def chain_pieces(segments: Sequence[Segment], token_ids: Sequence[Sequence[int]], *,
                 fingerprint: str) -> Prompt:
    """A prompt from segments already tokenized (``token_ids[i]`` are segment i's ids): lays
    the pieces end to end and chains the reusable ones into prefix-tree keys. A prompt-building
    plugin that tokenizes in its own way uses this so its keys match the store's."""
    if len(token_ids) != len(segments):
        raise SegmentError(f"{len(segments)} segments but {len(token_ids)} token id lists")
    pieces: list[PromptPiece] = []
    start, parent = 0, None
    cacheable = True  # a reusable segment after a query-like break would not be a prefix
    for i, (seg, seg_ids) in enumerate(zip(segments, token_ids, strict=True)):
        ids = [int(t) for t in seg_ids]
        if not ids:
            raise SegmentError(f"segment {i} ({seg.kind}) tokenizes to nothing")
        key = None
        if seg.reusable and cacheable:
            key = node_key(fingerprint, parent, ids)
            parent = key
        else:
            cacheable = False
        pieces.append(PromptPiece(seg, tuple(ids), start, key))
        start += len(ids)
    return Prompt(tuple(pieces))
