"""The turn log as JSONL for fine-tuning elsewhere (format: docs/memory-log.md).

``sft``: one conversation per line whose last assistant message is the target (a reply the
user accepted, or the user's edit of it). ``preference``: one pair per line, the user's edit
``chosen`` over the model's reply ``rejected``, after the same prompt. Both use the
conversational layout of Hugging Face TRL's datasets (``messages``; ``prompt``/``chosen``/
``rejected``), plus a ``meta`` object saying where the line came from.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..filemodes import FILE_MODE
from .record import TurnRecord

__all__ = ["EXPORT_FORMATS", "ExportReport", "export_jsonl", "sft_line", "preference_line"]

EXPORT_FORMATS = ("sft", "preference")


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote.

    :ivar written: lines written.
    :ivar turns: turns read from the log.
    :ivar skipped: turns with nothing to learn in this format (no feedback; rejected without an
        edit; for ``preference``, accepted replies and edits equal to the reply).
    """

    path: Path
    format: str
    written: int
    turns: int
    skipped: int


def _prompt(record: TurnRecord) -> list[dict[str, str]]:
    out = [{"role": "system", "content": record.system}] if record.system is not None else []
    for user, reply in record.history:
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    out.append({"role": "user", "content": record.message})
    return out


def _meta(record: TurnRecord, source: str) -> dict[str, Any]:
    return {"log_id": record.log_id, "session": record.session, "turn_id": record.turn_id,
            "persona": record.persona, "fingerprint": record.fingerprint,
            "context_hash": record.context_hash, "fact_ids": list(record.fact_ids), "source": source}


def sft_line(record: TurnRecord) -> dict[str, Any] | None:
    """The SFT line of a turn: target = the user's edit, else the reply if accepted; None
    without either."""
    if record.edited_text is not None:
        target, source = record.edited_text, "edited"
    elif record.accepted:
        target, source = record.output, "accepted"
    else:
        return None
    return {"messages": [*_prompt(record), {"role": "assistant", "content": target}],
            "meta": _meta(record, source)}


def preference_line(record: TurnRecord) -> dict[str, Any] | None:
    """The preference pair of a turn: the edit over the reply; None without an edit that
    differs from the reply."""
    if record.edited_text is None or record.edited_text == record.output:
        return None
    return {"prompt": _prompt(record),
            "chosen": [{"role": "assistant", "content": record.edited_text}],
            "rejected": [{"role": "assistant", "content": record.output}],
            "meta": _meta(record, "edited")}


def export_jsonl(records: Iterable[TurnRecord], out: str | Path, fmt: str = "sft") -> ExportReport:
    """Write ``records`` as JSONL in format ``fmt`` to ``out`` (owner-only; written to a temp
    file, fsynced and renamed, so ``out`` is never half-written).

    :raises ValueError: an unknown format, ``out`` a directory or in none."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    line = sft_line if fmt == "sft" else preference_line
    path = Path(out).expanduser()
    if path.is_dir():
        raise ValueError(f"--out {str(path)!r} is a directory; give a file name")
    if not path.parent.is_dir():  # else the error names the temporary file written first
        raise ValueError(f"--out {str(path)!r}: no directory {str(path.parent)!r}; create it first")
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    written = turns = 0
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for record in records:
                turns += 1
                obj = line(record)
                if obj is not None:
                    f.write(json.dumps(obj, ensure_ascii=False) + "\n")
                    written += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ExportReport(path, fmt, written, turns, turns - written)
