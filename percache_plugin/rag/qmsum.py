"""Loader for QMSum meetings (Zhong et al., NAACL 2021) and their turn-level gold spans.

Layout: ``<root>/ALL/{train,val,test}/<meeting>.json`` (``root`` may also be the ``ALL``
folder itself). Each file has ``meeting_transcripts`` ([{speaker, content}]),
``topic_list``, ``general_query_list`` and ``specific_query_list`` ([{query, answer,
relevant_text_span}]); spans are ``[start, end]`` turn indices as strings, both ends
inclusive (ends reach the last turn, never past it).

Chunks of a meeting remember the turns they cover as ``metadata["turns"] = "start-end"``
(inclusive), so gold spans map to gold chunks without re-chunking.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from percache_plugin.rag.chunking import Chunk, Document, chunk_id, split_spans

__all__ = [
    "SPLITS",
    "Meeting",
    "Query",
    "Topic",
    "chunk_meeting",
    "chunk_turns",
    "chunks_for_spans",
    "iter_meetings",
    "iter_series",
    "load_meeting",
    "meeting_text",
    "series_id",
]

SPLITS = ("train", "val", "test")
TurnSpan = tuple[int, int]


@dataclass(frozen=True)
class Query:
    """A query with its reference answer; ``spans`` are inclusive turn ranges (empty for
    general queries, which are about the whole meeting)."""

    text: str
    answer: str
    spans: tuple[TurnSpan, ...]
    kind: Literal["general", "specific"]


@dataclass(frozen=True)
class Topic:
    text: str
    spans: tuple[TurnSpan, ...]


@dataclass(frozen=True)
class Meeting:
    """One meeting: ``turns`` are ``(speaker, content)`` pairs in order."""

    id: str
    split: str | None
    turns: tuple[tuple[str, str], ...]
    queries: tuple[Query, ...]
    topics: tuple[Topic, ...] = ()


def _spans(raw: object, n_turns: int, where: str) -> tuple[TurnSpan, ...]:
    if not isinstance(raw, list):
        raise ValueError(f"{where}: relevant_text_span must be a list, got {type(raw).__name__}")
    spans = []
    for item in raw:
        try:
            start, end = (int(x) for x in item)
        except (TypeError, ValueError):
            raise ValueError(
                f"{where}: span {item!r} is not a [start, end] pair of integers"
            ) from None
        if not 0 <= start <= end < n_turns:
            raise ValueError(f"{where}: span {item!r} is outside turns 0..{n_turns - 1}")
        spans.append((start, end))
    return tuple(spans)


def load_meeting(path: Path | str) -> Meeting:
    """Read one QMSum meeting file; the split is taken from the parent folder's name."""
    path = Path(path)
    try:
        data = json.loads(path.read_text("utf-8"))
        turns = tuple((str(t["speaker"]), str(t["content"])) for t in data["meeting_transcripts"])
        general, specific = data["general_query_list"], data["specific_query_list"]
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a QMSum meeting file ({exc!r})") from exc
    if not turns:
        raise ValueError(f"{path}: meeting has no transcript turns")
    queries = [Query(str(q["query"]), str(q["answer"]), (), "general") for q in general]
    for i, q in enumerate(specific):
        spans = _spans(q.get("relevant_text_span", []), len(turns), f"{path} specific query {i}")
        queries.append(Query(str(q["query"]), str(q["answer"]), spans, "specific"))
    topics = tuple(
        Topic(
            str(t["topic"]),
            _spans(t.get("relevant_text_span", []), len(turns), f"{path} topic {i}"),
        )
        for i, t in enumerate(data.get("topic_list", []))
    )
    split = path.parent.name if path.parent.name in SPLITS else None
    return Meeting(path.stem, split, turns, tuple(queries), topics)


def _all_dir(root: Path | str) -> Path:
    root = Path(root)
    base = root / "ALL" if (root / "ALL").is_dir() else root
    if not any((base / s).is_dir() for s in SPLITS):
        raise FileNotFoundError(f"no QMSum split folders ({', '.join(SPLITS)}) under {root}")
    return base


def _meeting_files(root: Path | str, split: str | None) -> list[Path]:
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")
    base = _all_dir(root)
    splits = SPLITS if split is None else (split,)
    return [
        p
        for s in splits
        for p in sorted((base / s).glob("*.json"), key=lambda p: _order_key(p.stem))
    ]


def iter_meetings(root: Path | str, split: str | None = None) -> Iterator[Meeting]:
    """Meetings of one split (``None``: train, val, test in turn), in series order."""
    for path in _meeting_files(root, split):
        yield load_meeting(path)


_AMI = re.compile(r"([A-Z]{2}\d{4})([a-z])")  # ES2002a: series ES2002, session a
_ICSI = re.compile(r"(B[a-z]{2})(\d{3})")  # Bed004: research group Bed, meeting 004
_NUMBERED = re.compile(r"(.+?)_(\d+)")  # covid_4: committee "covid", sitting 4


def series_id(meeting_id: str) -> str:
    """The recurring series a meeting belongs to.

    AMI (``ES2002a``..``ES2002d``): the id without the session letter (one team's four
    design meetings). ICSI (``Bed004``, ``Bmr019``): the three-letter group code, since
    each code is one research group's regular meeting. Committee (``covid_4``,
    ``education_13``): the name before ``_<n>`` (one committee). Anything else is a
    series of its own.
    """
    for pattern in (_AMI, _ICSI, _NUMBERED):
        match = pattern.fullmatch(meeting_id)
        if match:
            return match.group(1)
    return meeting_id


def _order_key(meeting_id: str) -> tuple[str, int, str]:
    series = series_id(meeting_id)
    rest = meeting_id[len(series) :].lstrip("_")
    digits = re.match(r"\d*", rest).group()  # type: ignore[union-attr]  # \d* always matches
    return (series, int(digits) if digits else -1, rest[len(digits) :])


def iter_series(root: Path | str, split: str | None = None) -> Iterator[tuple[str, list[Meeting]]]:
    """``(series_id, meetings in order)`` per series, series sorted by id. With
    ``split=None`` a series gathers its meetings from all splits."""
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in _meeting_files(root, split):
        groups[series_id(path.stem)].append(path)
    for series in sorted(groups):
        paths = sorted(groups[series], key=lambda p: _order_key(p.stem))
        yield series, [load_meeting(p) for p in paths]


def meeting_text(meeting: Meeting) -> str:
    """One ``"Speaker: content"`` line per turn; newlines inside a turn become spaces so
    line ``i`` is always turn ``i``."""
    return "\n".join(
        f"{speaker}: {' '.join(content.split())}" for speaker, content in meeting.turns
    )


def chunk_meeting(
    meeting: Meeting,
    target_words: int = 100,
    *,
    max_words: int | None = None,
    scope: str | None = None,
) -> list[Chunk]:
    """Chunk a meeting on turn boundaries; each chunk's ``metadata["turns"]`` is the
    inclusive turn range ``"start-end"`` it covers (a long turn may span several chunks)."""
    text = meeting_text(meeting)
    doc = Document(text, id=meeting.id, scope=scope, metadata={"meeting": meeting.id})
    spans = split_spans(text, target_words=target_words, max_words=max_words, units="turns")
    line_starts = [0]
    for line in text.split("\n")[:-1]:
        line_starts.append(line_starts[-1] + len(line) + 1)
    chunks = []
    for index, (start, end) in enumerate(spans):
        first = bisect_right(line_starts, start) - 1
        last = bisect_right(line_starts, end - 1) - 1
        chunks.append(
            Chunk(
                id=chunk_id(text[start:end], scope),
                doc_id=meeting.id,
                index=index,
                text=text[start:end],
                scope=scope,
                metadata={**doc.metadata, "turns": f"{first}-{last}"},
            )
        )
    return chunks


def chunk_turns(chunk: Chunk) -> TurnSpan:
    """The inclusive turn range of a chunk made by :func:`chunk_meeting`."""
    raw = chunk.metadata.get("turns")
    if raw is None:
        raise ValueError(
            f"chunk {chunk.id!r} has no 'turns' metadata; make it with chunk_meeting()"
        )
    start, _, end = raw.partition("-")
    return int(start), int(end)


def chunks_for_spans(chunks: Iterable[Chunk], spans: Iterable[TurnSpan]) -> list[Chunk]:
    """Chunks whose turns overlap any of the inclusive turn ``spans`` (the gold chunks)."""
    spans = list(spans)
    return [
        c
        for c in chunks
        if any(s <= chunk_turns(c)[1] and chunk_turns(c)[0] <= e for s, e in spans)
    ]
