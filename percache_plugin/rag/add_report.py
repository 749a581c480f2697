"""What :meth:`~.knowledge.KnowledgeBank.add_documents` (or a removal) did to the knowledge bank."""

from __future__ import annotations

from dataclasses import dataclass

from .chunking import Chunk

__all__ = ["AddReport"]


@dataclass(frozen=True)
class AddReport:
    """What :meth:`KnowledgeBank.add_documents` did (or a removal: no documents, the chunks
    deleted as ``replaced_chunks``, passed to ``KnowledgeBank.after_remove``).

    :ivar documents: documents received.
    :ivar new_chunks: chunks that were not in the bank before (embedded and indexed now).
    :ivar duplicate_chunks: chunks already present (same text in the same scope), skipped.
    :ivar replaced_chunks: ids of the chunks removed because a document given again with the
        same id and scope no longer has them (its text changed, or the chunk size did).
    :ivar relabelled_chunks: ids of chunks kept under another document (a paragraph passed to
        another holder), at another position or with other metadata (a document given again).
    :ivar scopes: the scopes whose chunks changed (chunks added, replaced or removed): their
        questions may retrieve other chunks now.
    """

    documents: int
    new_chunks: tuple[Chunk, ...]
    duplicate_chunks: int
    replaced_chunks: tuple[str, ...] = ()
    relabelled_chunks: tuple[str, ...] = ()
    scopes: tuple[str | None, ...] = ()
