"""What the store admin reports: a store's sizes and entries (:class:`StoreInfo`), its
documents, the K/V of each model fingerprint, and what a removal deleted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DocumentInfo", "FingerprintInfo", "RemoveReport", "StoreInfo", "dir_bytes"]


@dataclass(frozen=True)
class FingerprintInfo:
    """K/V of one model fingerprint: nodes, tokens, bytes, and how often they were served."""

    fingerprint: str
    nodes: int
    tokens: int
    bytes: int
    hits: int

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class DocumentInfo:
    """A document of the knowledge bank: its chunks and the QA entries built on them."""

    doc_id: str
    scope: str | None
    chunks: int
    words: int
    qa_entries: int


@dataclass
class StoreInfo:
    """What :meth:`StoreAdmin.info` found. Sizes are bytes on disk."""

    path: Path
    bytes_kv: int = 0
    bytes_knowledge: int = 0
    bytes_database: int = 0
    bytes_qa: int = 0
    documents: int = 0
    chunks: int = 0
    qa_entries: int = 0
    qa_answered: int = 0
    qa_stale: int = 0
    qa_hits: int = 0
    embedder: str | None = None
    fingerprints: list[FingerprintInfo] = field(default_factory=list)

    @property
    def bytes_total(self) -> int:
        return self.bytes_kv + self.bytes_knowledge + self.bytes_database

    def summary(self) -> str:
        """A few lines a person can read."""
        mb = 1e6
        lines = [
            f"store {self.path}: {self.bytes_total / mb:.1f} MB",
            f"  K/V tensors     {self.bytes_kv / mb:8.1f} MB",
            f"  knowledge index {self.bytes_knowledge / mb:8.1f} MB",
            f"  SQLite database {self.bytes_database / mb:8.1f} MB "
            f"(QA bank entries {self.bytes_qa / mb:.1f} MB of it)",
            f"documents {self.documents}, chunks {self.chunks}"
            + (f" (embedder {self.embedder})" if self.embedder else ""),
            f"QA bank: {self.qa_entries} entries ({self.qa_answered} answered, "
            f"{self.qa_stale} stale), served {self.qa_hits} times",
            f"model fingerprints with K/V: {len(self.fingerprints)}",
        ]
        for f in self.fingerprints:
            lines.append(f"  {f.fingerprint[:16]}  {f.nodes} nodes, {f.tokens} tokens, "
                         f"{f.bytes / mb:.1f} MB ({f.bytes_per_token / 1e3:.1f} KB/token), "
                         f"served {f.hits} times")
        return "\n".join(lines)


@dataclass(frozen=True)
class RemoveReport:
    """What a removal deleted."""

    documents: int = 0
    chunks: int = 0
    kv_nodes: int = 0
    qa_entries: int = 0
    stale_answers: int = 0  # answers of the document's scopes marked stale (not served)


def dir_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
