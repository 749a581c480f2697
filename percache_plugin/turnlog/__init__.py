"""The interaction log (memory level L3): every chat turn with its context hash, the memory
facts recalled for it, its output, latency and the user's feedback, for later fine-tuning of
a persona adapter elsewhere (``percache memory export``, docs/memory-log.md)."""

from .export import EXPORT_FORMATS, ExportReport, export_jsonl
from .log import TurnLog, UnknownTurn
from .record import TurnRecord, context_hash

__all__ = ["EXPORT_FORMATS", "ExportReport", "TurnLog", "TurnRecord", "UnknownTurn", "context_hash",
           "export_jsonl"]
