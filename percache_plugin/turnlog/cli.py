"""``percache memory export STORE --out FILE [--format sft|preference] [--persona NAME]``: the
turn log of a store as JSONL for fine-tuning a persona adapter elsewhere (no model loaded).
The line formats are described in docs/memory-log.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli_errors import UsageError
from ..session.persist import SESSIONS_DB
from .export import EXPORT_FORMATS, export_jsonl
from .log import TurnLog

__all__ = ["add_export_arguments", "export"]


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``export`` (the store is the group's ``store`` argument)."""
    p.add_argument("--out", type=Path, default=None, help="export: the JSONL file to write")
    p.add_argument("--format", choices=EXPORT_FORMATS, default="sft",
                   help="export: sft (accepted replies and edits as targets) or preference "
                        "(the user's edit chosen over the model's reply)")
    p.add_argument("--persona", default=None, help="export: only turns of this persona")


def export(args: argparse.Namespace) -> int:
    store: Path = args.store
    if args.out is None:
        raise UsageError("'memory export' needs --out FILE", "e.g. percache memory export STORE --out turns.jsonl")
    db = store / SESSIONS_DB
    if not db.is_file():
        raise UsageError(f"{str(store)!r} holds no chat turns (no {SESSIONS_DB} in it)",
                         "pass the directory given to enable(store=...) after some pc.chat() turns")
    log = TurnLog(db)
    try:
        report = export_jsonl(log.records(persona=args.persona), args.out, args.format)
    finally:
        log.close()
    print(f"wrote {report.written} {report.format} lines to {report.path} "
          f"({report.turns} turns read, {report.skipped} with nothing to learn in this format)")
    return 0
