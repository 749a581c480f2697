"""Helpers shared by the benchmarks: text sources, timing, tables."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["NO_CALIBRATION", "DEFAULT_QMSUM", "DEFAULT_LOCOMO", "QMSUM_HINT", "THREADS_HELP", "spread", "require_plotting", "require_qmsum", "transcript_chunks", "median", "markdown_table", "write_json"]

NO_CALIBRATION: Mapping[str, Any] = MappingProxyType({"draft_calibrate_idle": False})
"""enable() keywords of benchmarks that time idle work or idle phases of their own: the verify cost
calibration (about 35 s on SmolLM2, once per store and machine) would run in them."""

DEFAULT_QMSUM = Path("../shared/data/qmsum")
DEFAULT_LOCOMO = Path("../shared/data/locomo/locomo_dev5.json")
QMSUM_HINT = ("the benchmarks replay real meeting transcripts from QMSum "
              "(https://github.com/Yale-LILY/QMSum, its data/ folder with ALL/train|val|test): "
              f"put it at {DEFAULT_QMSUM} (relative to where you run percache) or pass --data PATH")


def require_plotting(bench: str) -> None:
    """Fail at once, before any benchmark work, when matplotlib (the plots) is missing.

    :raises UsageError: naming ``bench`` and the install command.
    """
    import importlib.util

    from ..cli_errors import UsageError

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{bench} draws its plots with matplotlib, which is not installed",
                         "pip install 'percache-plugin[bench]'")


def require_qmsum(data: Path) -> Path:
    """``data`` if it holds QMSum meetings (``ALL/<split>/*.json`` or ``<split>/*.json``), else a
    :class:`~percache_plugin.cli_errors.UsageError` saying the bench needs QMSum and where to put it."""
    from ..cli_errors import UsageError

    for base in (data / "ALL", data):
        if any(any((base / split).glob("*.json")) for split in ("train", "val", "test") if (base / split).is_dir()):
            return data
    raise UsageError(f"this benchmark needs the QMSum data set; no QMSum meetings under {str(data)!r}",
                     QMSUM_HINT)


def transcript_chunks(data: Path, n_chunks: int, words: int, *, meeting: int = 0) -> tuple[list[str], str]:
    """``n_chunks`` consecutive chunks of about ``words`` words of a real QMSum transcript, and a
    question about that meeting. Raises FileNotFoundError naming ``data`` when it is absent."""
    files = sorted((data / "ALL" / "test").glob("*.json")) if data.is_dir() else []
    if not files:
        require_qmsum(data)
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


THREADS_HELP = ("torch threads (default 1: on a shared or busy machine more threads make timings, "
                "and the ratios between them, swing widely; 1 thread kept them stable)")


def spread(xs: Sequence[float]) -> tuple[float, float]:
    """The interquartile range (25th, 75th percentile) of ``xs``: how much repeats disagree."""
    if not xs:
        return float("nan"), float("nan")
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[2]


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
