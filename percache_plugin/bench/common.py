"""Helpers shared by the benchmarks: text sources, timing, tables."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_QMSUM", "transcript_chunks", "median", "markdown_table", "write_json"]

DEFAULT_QMSUM = Path("../shared/data/qmsum")


def transcript_chunks(data: Path, n_chunks: int, words: int, *, meeting: int = 0) -> tuple[list[str], str]:
    """``n_chunks`` consecutive chunks of about ``words`` words of a real QMSum transcript, and a
    question about that meeting. Raises FileNotFoundError naming ``data`` when it is absent."""
    files = sorted((data / "ALL" / "test").glob("*.json")) if data.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no QMSum meetings under {data}/ALL/test (pass --data)")
    m = json.loads(files[meeting % len(files)].read_text())
    chunks, cur, n = [], [], 0
    for turn in m["meeting_transcripts"]:
        line = f"{turn['speaker']}: {turn['content']}"
        cur.append(line)
        n += len(line.split())
        if n >= words:
            chunks.append("\n".join(cur))
            cur, n = [], 0
            if len(chunks) == n_chunks:
                break
    query = m["specific_query_list"][0]["query"] if m["specific_query_list"] else m["general_query_list"][0]["query"]
    return chunks, query


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2))
