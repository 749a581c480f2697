"""The knowledge bank's source of truth: chunk rows (text, scope, metadata, vector) in SQLite.

Several processes and handles may share a bank: rows are inserted with ``INSERT OR IGNORE``
(the same chunk added twice is stored once) and every change bumps ``generation`` in the same
transaction, so an in-memory index can tell cheaply whether it must reconcile with the rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from ..sqlite_tx import Schema, checkpoint, connect, transaction
from .chunking import Chunk

__all__ = ["KB_SCHEMA", "ChunkRows"]

log = logging.getLogger("percache")

KB_SCHEMA = Schema("knowledge", 1, """
CREATE TABLE IF NOT EXISTS kb_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kb_chunks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, doc_id TEXT NOT NULL,
    idx INTEGER NOT NULL, text TEXT NOT NULL, scope TEXT, metadata TEXT NOT NULL, vector BLOB,
    relabelled INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS kb_members (
    chunk_id TEXT NOT NULL, doc_id TEXT NOT NULL, idx INTEGER, metadata TEXT,
    PRIMARY KEY (chunk_id, doc_id));
""")
_BATCH = 500  # ids per IN (...) query


class ChunkRows:
    """Chunk rows of one bank (``path`` None: in memory), bound to one embedder."""

    def __init__(self, path: Path | None, embedder_name: str, dim: int) -> None:
        self.dim = dim
        self.repaired = 0  # rows whose metadata JSON was unreadable (kept, metadata dropped)
        self.db = connect(path, KB_SCHEMA)
        try:
            with transaction(self.db):
                row = self.db.execute("SELECT value FROM kb_meta WHERE name = 'embedder'").fetchone()
                if row is None or self.count() == 0:
                    self.db.execute("INSERT OR REPLACE INTO kb_meta VALUES ('embedder', ?), "
                                    "('dim', ?)", (embedder_name, str(dim)))
                elif row[0] != embedder_name:
                    raise ValueError(
                        f"knowledge bank at {path.parent if path else 'memory'} was built with "
                        f"embedder {row[0]!r}, not {embedder_name!r}; use the same embedder or a "
                        "new store")
                self.db.execute("INSERT OR IGNORE INTO kb_meta VALUES ('generation', '0')")
                # where each holder has the chunk: the row takes it when it passes to that holder
                if "idx" not in {r[1] for r in self.db.execute("PRAGMA table_info(kb_members)")}:
                    self.db.execute("ALTER TABLE kb_members ADD COLUMN idx INTEGER")
                    self.db.execute("ALTER TABLE kb_members ADD COLUMN metadata TEXT")
                # the generation that last changed a row's holder, position or metadata
                if "relabelled" not in {r[1] for r in self.db.execute("PRAGMA table_info(kb_chunks)")}:
                    self.db.execute("ALTER TABLE kb_chunks ADD COLUMN relabelled INTEGER NOT NULL DEFAULT 0")
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    def generation(self) -> int:
        row = self.db.execute("SELECT value FROM kb_meta WHERE name = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM kb_chunks").fetchone()[0])

    def ids(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT id FROM kb_chunks")}

    def _bump(self) -> None:
        self.db.execute("UPDATE kb_meta SET value = CAST(value AS INTEGER) + 1 "
                        "WHERE name = 'generation'")

    def insert(self, chunks: Sequence[Chunk], vectors: np.ndarray, *,
               members: Iterable[tuple[str, str]] = (),
               dropped: Iterable[tuple[str, str]] = (),
               given: Iterable[Chunk] = ()) -> tuple[int, list[str], list[str]]:
        """Store chunks with their vectors, record which documents hold which chunks
        (``members``: chunk id, document id) and remove the ``dropped`` memberships, in one
        transaction (a reader never sees a document with neither its old nor its new chunks).
        A dropped chunk's row goes when no document holds it any more (:meth:`_release`). A
        row the document of a ``given`` chunk stored takes that chunk's position and metadata
        (a document given again with new metadata). Returns how many rows were added, deleted
        or relabelled, the ids deleted and the ids relabelled (another holder, position or
        metadata)."""
        rows = [(c.id, c.doc_id, c.index, c.text, c.scope, json.dumps(dict(c.metadata)),
                 np.asarray(v, dtype=np.float32).tobytes()) for c, v in zip(chunks, vectors, strict=True)]
        dropped = list(dropped)
        with transaction(self.db):
            before = self.db.total_changes
            self.db.executemany("INSERT OR IGNORE INTO kb_chunks (id, doc_id, idx, text, scope, "
                                "metadata, vector) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            added = self.db.total_changes - before
            given = list(given)
            relabelled = {c.id for c in given if self._relabel(c)}
            self.db.executemany("INSERT OR IGNORE INTO kb_members (chunk_id, doc_id) VALUES (?, ?)",
                                list(members))
            self.db.executemany("UPDATE kb_members SET idx = ?, metadata = ? WHERE chunk_id = ? AND doc_id = ?",
                                [(c.index, json.dumps(dict(c.metadata)), c.id, c.doc_id) for c in given])
            self.db.executemany("DELETE FROM kb_members WHERE chunk_id = ? AND doc_id = ?", dropped)
            released = {cid: self._release(cid, doc_id) for cid, doc_id in dropped}
            gone = sorted(cid for cid, fate in released.items() if fate == "gone")
            relabelled |= {cid for cid, fate in released.items() if fate == "passed"}
            self.db.executemany("DELETE FROM kb_chunks WHERE id = ?", [(i,) for i in gone])
            if relabelled:  # other banks read these rows' labels again (:meth:`relabelled`)
                self.db.executemany("UPDATE kb_chunks SET relabelled = ? WHERE id = ?",
                                    [(self.generation() + 1, i) for i in relabelled])
            if added or gone or relabelled:
                self._bump()
        if gone:  # the database file keeps the deleted text until the WAL is checkpointed
            checkpoint(self.db)
        return added + len(gone) + len(relabelled), gone, sorted(relabelled)

    def _relabel(self, chunk: Chunk) -> bool:
        """The row ``chunk``'s document stored takes its position and metadata; True if it changed."""
        meta = json.dumps(dict(chunk.metadata))
        return self.db.execute(
            "UPDATE kb_chunks SET idx = ?, metadata = ? WHERE id = ? AND doc_id = ? AND "
            "(idx != ? OR metadata != ?)",
            (chunk.index, meta, chunk.id, chunk.doc_id, chunk.index, meta)).rowcount > 0

    def _release(self, chunk_id: str, doc_id: str) -> str:
        """``doc_id`` no longer holds ``chunk_id``: "gone" when its row is to go (the document
        stored it and none holds it now), "passed" when the row passes to another document
        that holds it, "" when another document stored it."""
        if self.db.execute("SELECT 1 FROM kb_chunks WHERE id = ? AND doc_id = ?",
                           (chunk_id, doc_id)).fetchone() is None:
            return ""
        heir = self.db.execute("SELECT doc_id, idx, metadata FROM kb_members WHERE chunk_id = ? LIMIT 1",
                               (chunk_id,)).fetchone()
        if heir is None:
            return "gone"
        # the holder's own position and metadata (unknown for memberships recorded before them)
        self.db.execute("UPDATE kb_chunks SET doc_id = ?, idx = COALESCE(?, idx), "
                        "metadata = COALESCE(?, metadata) WHERE id = ?", (*heir, chunk_id))
        return "passed"

    def relabelled(self, held: Callable[[str], Chunk | None], since: int) -> list[Chunk]:
        """The chunks an index holds (``held(id)``) whose row names another document,
        position or metadata since generation ``since`` (-1: any row), as the row has them now."""
        out = []
        for cid, doc_id, idx, meta in self.db.execute(
                "SELECT id, doc_id, idx, metadata FROM kb_chunks WHERE relabelled > ?", (since,)):
            c = held(cid)
            if c is None:
                continue
            metadata = _decoded(meta) or {}
            if (doc_id, idx, metadata) != (c.doc_id, c.index, dict(c.metadata)):
                out.append(Chunk(c.id, doc_id, int(idx), c.text, c.scope, metadata))
        return out

    def document_chunks(self, doc_id: str, scope: str | None) -> set[str]:
        """The ids of the chunks document ``doc_id`` of ``scope`` stored or holds."""
        return {r[0] for r in self.db.execute(
            "SELECT id FROM kb_chunks WHERE doc_id = ? AND scope IS ? UNION "
            "SELECT m.chunk_id FROM kb_members m JOIN kb_chunks c ON c.id = m.chunk_id "
            "WHERE m.doc_id = ? AND c.scope IS ?", (doc_id, scope, doc_id, scope))}

    def document_scopes(self, doc_id: str) -> set[str | None]:
        """The scopes in which a document ``doc_id`` stored or holds chunks."""
        return {r[0] for r in self.db.execute(
            "SELECT scope FROM kb_chunks WHERE doc_id = ? UNION "
            "SELECT c.scope FROM kb_members m JOIN kb_chunks c ON c.id = m.chunk_id "
            "WHERE m.doc_id = ?", (doc_id, doc_id))}

    def delete(self, ids: Iterable[str]) -> int:
        ids = list(ids)
        with transaction(self.db):
            before = self.db.total_changes
            self.db.executemany("DELETE FROM kb_chunks WHERE id = ?", [(i,) for i in ids])
            removed = self.db.total_changes - before
            self.db.executemany("DELETE FROM kb_members WHERE chunk_id = ?", [(i,) for i in ids])
            if removed:
                self._bump()
        if removed:
            checkpoint(self.db)
        return removed

    def fetch(self, ids: Iterable[str]) -> list[tuple[Chunk, np.ndarray | None]]:
        """These chunks in the order added, each with its vector (None when the stored
        vector is missing or unusable: the caller re-embeds)."""
        ids = list(ids)
        rows: list[tuple] = []
        for i in range(0, len(ids), _BATCH):
            part = ids[i:i + _BATCH]
            rows += self.db.execute(
                "SELECT seq, id, doc_id, idx, text, scope, metadata, vector FROM kb_chunks "
                f"WHERE id IN ({', '.join('?' * len(part))})", part).fetchall()
        out = []
        for _, cid, doc_id, idx, text, scope, metadata, blob in sorted(rows):
            out.append((Chunk(cid, doc_id, int(idx), text, scope, self._metadata(cid, metadata)),
                        self._vector(blob)))
        return out

    def set_vector(self, chunk_id: str, vector: np.ndarray) -> None:
        with transaction(self.db):
            self.db.execute("UPDATE kb_chunks SET vector = ? WHERE id = ?",
                            (np.asarray(vector, dtype=np.float32).tobytes(), chunk_id))

    def _metadata(self, chunk_id: str, text: str) -> dict[str, str]:
        data = _decoded(text)
        if data is not None:
            return data
        self.repaired += 1
        log.warning("percache knowledge bank: chunk %s has unreadable metadata; dropped", chunk_id)
        return {}

    def _vector(self, blob: object) -> np.ndarray | None:
        if not isinstance(blob, bytes) or len(blob) != self.dim * 4:
            return None
        vector = np.frombuffer(blob, dtype=np.float32)
        if not np.isfinite(vector).all() or not np.linalg.norm(vector) > 0:
            return None
        return vector


def _decoded(text: str) -> dict[str, str] | None:
    """A row's metadata JSON as a dict (None when it is not a mapping of strings)."""
    try:
        data = json.loads(text)
        if isinstance(data, dict) and all(isinstance(v, str) for v in data.values()):
            return data
    except (TypeError, ValueError):
        pass
    return None
