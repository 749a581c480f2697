"""Hybrid chunk index: BM25 (rank_bm25) + HNSW cosine (hnswlib), fused by reciprocal rank.

The rankers and their fusion live in :mod:`percache_plugin.rag.ranking` (BM25Okapi is
static, so it is rebuilt lazily on the first search after the corpus changed). The HNSW index grows with ``resize_index`` and reuses the slots of removed
chunks (``mark_deleted`` + ``replace_deleted``). Saving and loading (verified, atomic)
live in :mod:`percache_plugin.rag.index_files`; loading never re-embeds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import inf
from pathlib import Path

import hnswlib
import numpy as np

from percache_plugin.rag.chunking import Chunk
from percache_plugin.rag.fuse_many import rrf_many
from percache_plugin.rag.index_files import (
    CorruptIndexError,
    chunk_record,
    parse_snapshot,
    read_snapshot,
    write_snapshot,
)
from percache_plugin.rag.ranking import BM25Ranker, Fusion, Hit, fuse, tokenize
from percache_plugin.rag.vectors import positive_int, unit_rows

__all__ = ["CorruptIndexError", "Fusion", "Hit", "HybridIndex", "tokenize"]

_BLOCK = 512  # queries fused at once by search_many (its arrays: queries x chunks)

@dataclass
class _Entry:
    chunk: Chunk
    label: int
    vector: np.ndarray
    tokens: list[str]


class HybridIndex:
    """Chunks searchable by keywords and by embedding, optionally restricted to a scope.

    Fusion (``fusion="rrf"``, weighted reciprocal-rank fusion): each ranker returns its
    top ``candidates`` chunks (BM25: only chunks sharing a token with the query); a
    chunk's score is ``bm25_weight / (rrf_k + bm25_rank) + vector_weight / (rrf_k +
    vector_rank)``, a term counting only if that ranker returned the chunk. With positive
    weights a chunk both rankers put first always scores highest. ``"bm25"`` and
    ``"vector"`` use one ranker and score by its raw value (BM25 score, cosine
    similarity). Ties keep the better single rank, then insertion order. BM25 statistics
    (idf, average length) are computed over all chunks; the scope only filters results.

    The defaults (``rrf_k=5``, BM25 at half the vector weight) were chosen on the QMSum
    val split with all-MiniLM-L6-v2 and ~100-word chunks: hit@3 0.717 vs 0.684 for
    embeddings alone, 0.591 for BM25 alone and 0.662 for plain RRF (``rrf_k=60``, equal
    weights), which fell below embeddings alone. ``benchmarks/retrieval.py`` reproduces
    this; a small ``rrf_k`` keeps each ranker's top positions decisive in corpora of a
    few hundred chunks.
    """

    def __init__(
        self,
        dim: int,
        *,
        fusion: Fusion = "rrf",
        rrf_k: int = 5,
        bm25_weight: float = 0.5,
        vector_weight: float = 1.0,
    ) -> None:
        self._dim = positive_int("dim", dim)
        if fusion not in ("rrf", "bm25", "vector"):
            raise ValueError(f"fusion must be 'rrf', 'bm25' or 'vector', got {fusion!r}")
        if isinstance(rrf_k, bool) or not isinstance(rrf_k, int) or rrf_k < 0:
            raise ValueError(f"rrf_k must be a non-negative int, got {rrf_k!r}")
        for name, weight in (("bm25_weight", bm25_weight), ("vector_weight", vector_weight)):
            if (
                isinstance(weight, bool)
                or not isinstance(weight, (int, float))
                or not 0 < weight < inf
            ):
                raise ValueError(f"{name} must be a positive finite number, got {weight!r}")
        self._fusion: Fusion = fusion
        self._rrf_k = rrf_k
        self._weights = (float(bm25_weight), float(vector_weight))
        self._entries: dict[str, _Entry] = {}
        self._by_label: dict[int, _Entry] = {}
        self._scopes: Counter[str | None] = Counter()
        self._next_label = 0
        self._hnsw = hnswlib.Index(space="cosine", dim=self._dim)
        self._hnsw.init_index(
            max_elements=256, M=16, ef_construction=200, allow_replace_deleted=True
        )
        self._blank = np.eye(1, self._dim, dtype=np.float32)  # what a removed chunk's slot holds
        self.scrubbed = 0  # slots :meth:`load` overwrote: the snapshot read still holds them
        self._bm25 = BM25Ranker(
            lambda: [(e.chunk.id, e.chunk.scope, e.tokens) for e in self._entries.values()])

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def fusion(self) -> Fusion:
        return self._fusion

    @property
    def rrf_k(self) -> int:
        return self._rrf_k

    @property
    def weights(self) -> tuple[float, float]:
        """``(bm25_weight, vector_weight)`` used by RRF fusion."""
        return self._weights

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._entries

    def chunk(self, chunk_id: str) -> Chunk:
        try:
            return self._entries[chunk_id].chunk
        except KeyError:
            raise KeyError(f"no chunk {chunk_id!r} in the index") from None

    def vectors(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """The stored unit embeddings of these chunks, one row each (KeyError names an
        unknown id)."""
        rows = []
        for cid in chunk_ids:
            if cid not in self._entries:
                raise KeyError(f"no chunk {cid!r} in the index")
            rows.append(self._entries[cid].vector)
        return np.stack(rows) if rows else np.zeros((0, self._dim), np.float32)

    def chunks(self) -> list[Chunk]:
        """Every chunk, in insertion order."""
        return [e.chunk for e in self._entries.values()]

    def add(self, chunks: Sequence[Chunk], embeddings: np.ndarray) -> int:
        """Add chunks with their embeddings (row i belongs to chunk i); returns how many
        were new. Chunks whose id is already indexed (or repeated in the batch) are skipped."""
        if isinstance(chunks, (str, Chunk)) or not isinstance(chunks, Sequence):
            raise TypeError(f"add() needs a sequence of Chunk, got {type(chunks).__name__}")
        for i, chunk in enumerate(chunks):
            if not isinstance(chunk, Chunk):
                raise TypeError(f"add(): item {i} is {type(chunk).__name__}, not Chunk")
        if len(chunks) == 0:
            return 0
        vectors = unit_rows(embeddings, self._dim, "embeddings")
        if len(vectors) != len(chunks):
            raise ValueError(f"add(): {len(chunks)} chunks but {len(vectors)} embedding rows")
        new: list[_Entry] = []
        seen: set[str] = set()
        for chunk, vector in zip(chunks, vectors, strict=True):
            if chunk.id in self._entries or chunk.id in seen:
                continue
            seen.add(chunk.id)
            new.append(_Entry(chunk, self._next_label + len(new), vector, tokenize(chunk.text)))
        if not new:
            return 0
        needed = self._hnsw.element_count + len(new)
        if needed > self._hnsw.max_elements:
            self._hnsw.resize_index(max(needed, 2 * self._hnsw.max_elements))
        # One thread: a deterministic graph gives reproducible results in tests and benchmarks.
        self._hnsw.add_items(
            np.stack([e.vector for e in new]),
            [e.label for e in new],
            num_threads=1,
            replace_deleted=True,
        )
        for entry in new:
            self._entries[entry.chunk.id] = entry
            self._by_label[entry.label] = entry
            self._scopes[entry.chunk.scope] += 1
        self._next_label += len(new)
        self._bm25.invalidate()
        return len(new)

    def relabel(self, chunks: Iterable[Chunk]) -> None:
        """Indexed chunks take these chunks' document, position and metadata (same id and text)."""
        for chunk in chunks:
            entry = self._entries[chunk.id]
            if (chunk.text, chunk.scope) != (entry.chunk.text, entry.chunk.scope):
                raise ValueError(f"relabel: chunk {chunk.id!r} has another text or scope")
            entry.chunk = chunk

    def remove(self, chunk_ids: str | Iterable[str]) -> int:
        """Remove chunks by id (a single id or an iterable); unknown ids are ignored.
        Returns how many were removed."""
        ids = [chunk_ids] if isinstance(chunk_ids, str) else list(chunk_ids)
        removed = 0
        for chunk_id in ids:
            entry = self._entries.pop(chunk_id, None)
            if entry is None:
                continue
            # mark_deleted alone keeps the vector (in memory and in the next snapshot) until a
            # new chunk takes the slot: overwrite it first, so no trace of the text is left
            self._hnsw.add_items(self._blank, [entry.label], num_threads=1)
            self._hnsw.mark_deleted(entry.label)
            del self._by_label[entry.label]
            self._scopes[entry.chunk.scope] -= 1
            if not self._scopes[entry.chunk.scope]:
                del self._scopes[entry.chunk.scope]
            removed += 1
        if removed:
            self._bm25.invalidate()
        return removed

    def search(
        self,
        query: str,
        query_embedding: np.ndarray,
        k: int = 3,
        *,
        scope: str | None = None,
        candidates: int = 50,
    ) -> list[Hit]:
        """Best ``k`` chunks for ``query`` (see the class docstring for the fusion).

        :param query: the query text, for BM25.
        :param query_embedding: its embedding, shape ``[dim]`` or ``[1, dim]``.
        :param scope: only chunks of this scope; ``None`` means unscoped chunks only (never
            every scope: one user's chunks must not reach another's prompt).
        :param candidates: how many results each ranker contributes before fusion.
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        k = positive_int("k", k)
        candidates = max(positive_int("candidates", candidates), k)
        vector = unit_rows(query_embedding, self._dim, "query_embedding")
        if len(vector) != 1:
            raise ValueError(f"query_embedding must be one vector, got {len(vector)} rows")
        eligible = self._scopes.get(scope, 0)
        if eligible == 0:
            return []
        bm25 = self._bm25.rank(query, scope, candidates) if self._fusion != "vector" else []
        dense = self._vector_ranking(vector, scope, min(candidates, eligible)) if self._fusion != "bm25" else []
        return fuse(bm25, dense, fusion=self._fusion, weights=self._weights, rrf_k=self._rrf_k,
                    label=lambda cid: self._entries[cid].label, big=len(self._entries) + 1, limit=k)

    def search_many(self, queries: Sequence[tuple[str, np.ndarray]], k: int = 3, *,
                    scope: str | None = None, candidates: int = 50) -> list[list[Hit]]:
        """:meth:`search` for each ``(query, query_embedding)``: the same hits, from one BM25
        pass, one HNSW query and one fusion in arrays per block of queries (``fusion="rrf"``;
        the other fusions search one query at a time)."""
        k = positive_int("k", k)
        candidates = max(positive_int("candidates", candidates), k)
        eligible = self._scopes.get(scope, 0)
        if self._fusion != "rrf" or eligible == 0 or not queries:
            return [self.search(q, v, k, scope=scope, candidates=candidates) for q, v in queries]
        texts = [q for q, _ in queries]
        if not all(isinstance(q, str) for q in texts):
            raise TypeError("search_many: every query must be str")
        rows = [unit_rows(v, self._dim, "query_embedding") for _, v in queries]  # one by one,
        if any(len(r) != 1 for r in rows):  # as search() normalizes: the same floats
            raise ValueError("search_many: every query_embedding must be one vector")
        vectors = np.concatenate(rows)
        out: list[list[Hit]] = []
        n = min(candidates, eligible)
        for start in range(0, len(texts), _BLOCK):
            bm25, _ = self._bm25.top_many(texts[start:start + _BLOCK], scope, candidates)
            ids = self._bm25.ids  # corpus rows: the entries in insertion order
            labels = np.array([self._entries[cid].label for cid in ids], dtype=np.int64)
            row_of_label = np.full(self._next_label, -1, dtype=np.int64)
            row_of_label[labels] = np.arange(len(ids))
            dense = row_of_label[self._nearest(vectors[start:start + _BLOCK], scope, n)[0]]
            fused = rrf_many(bm25, dense, labels, weights=self._weights, rrf_k=self._rrf_k,
                             big=len(self._entries) + 1, limit=k)
            out += [[Hit(ids[r], score, b, d) for r, score, b, d in hits] for hits in fused]
        return out

    def _nearest(self, vectors: np.ndarray, scope: str | None, n: int) -> tuple[np.ndarray, np.ndarray]:
        """HNSW labels and cosines of the ``n`` nearest chunks of ``scope`` to each row, ``[rows,
        n]``, by one query (each row's walk is its own). hnswlib raises when a filtered walk finds
        fewer than ``n``: then a batch asks row by row, and such a row is scanned exactly."""
        def in_scope(label: int) -> bool:
            return self._by_label[label].chunk.scope == scope

        self._hnsw.set_ef(max(64, 2 * n))
        try:
            labels, distances = self._hnsw.knn_query(
                vectors, k=n, num_threads=1, filter=None if len(self._scopes) == 1 else in_scope)
        except RuntimeError:
            if len(vectors) > 1:
                rows = [self._nearest(v[None], scope, n) for v in vectors]
                return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])
            entries = [e for e in self._entries.values() if e.chunk.scope == scope]
            sims = np.stack([e.vector for e in entries]) @ vectors[0]
            top = np.lexsort((np.arange(len(entries)), -sims))[:n]
            return (np.array([[entries[i].label for i in top]], dtype=np.int64),
                    sims[top][None].astype(np.float64))
        return np.asarray(labels, dtype=np.int64), 1.0 - np.asarray(distances, dtype=np.float64)

    def _vector_ranking(self, vector: np.ndarray, scope: str | None, n: int) -> list[tuple[str, float]]:
        labels, sims = self._nearest(vector, scope, n)
        return [(self._by_label[int(lb)].chunk.id, float(sim)) for lb, sim in zip(labels[0], sims[0], strict=True)]

    def save(self, directory: Path | str) -> None:
        """Write the index to ``directory`` (created 0700 if missing); atomic as a whole
        (see :mod:`percache_plugin.rag.index_files`)."""
        entries = list(self._entries.values())
        vectors = (np.stack([e.vector for e in entries]) if entries
                   else np.zeros((0, self._dim), np.float32))
        settings = {"dim": self._dim, "fusion": self._fusion, "rrf_k": self._rrf_k,
                    "weights": list(self._weights), "next_label": self._next_label}
        write_snapshot(Path(directory), settings, [chunk_record(e.chunk, e.label) for e in entries], vectors,
                       lambda p: self._hnsw.save_index(str(p)))

    @classmethod
    def load(cls, directory: Path | str) -> HybridIndex:
        """Read an index written by :meth:`save`, without re-embedding anything. Every file
        is verified first; a damaged one raises :class:`CorruptIndexError` naming it."""
        snap = read_snapshot(Path(directory))
        settings, records = parse_snapshot(snap)
        index = cls(settings["dim"], fusion=settings["fusion"], rrf_k=settings["rrf_k"],
                    bm25_weight=settings["weights"][0], vector_weight=settings["weights"][1])
        hnsw = hnswlib.Index(space="cosine", dim=index.dim)
        hnsw.load_index(str(snap.hnsw_path), allow_replace_deleted=True)
        index._hnsw = hnsw
        for chunk, label, vector in records:
            entry = _Entry(chunk, label, vector, tokenize(chunk.text))
            index._entries[chunk.id] = entry
            index._by_label[label] = entry
            index._scopes[chunk.scope] += 1
        held = set(hnsw.get_ids_list())
        if set(index._by_label) - held or len(index._by_label) != len(records):
            raise CorruptIndexError(snap.hnsw_path, "lacks chunk labels of the manifest")
        index._next_label = settings["next_label"]
        index.scrubbed = index._scrub(held - set(index._by_label))
        return index

    def _scrub(self, labels: Iterable[int]) -> int:
        """Overwrite the vectors removed chunks left in their slots (a snapshot saved before
        removals overwrote them); returns how many were overwritten."""
        done = 0
        for label in labels:
            self._hnsw.unmark_deleted(label)
            if not np.array_equal(np.asarray(self._hnsw.get_items([label]), np.float32), self._blank):
                self._hnsw.add_items(self._blank, [label], num_threads=1)
                done += 1
            self._hnsw.mark_deleted(label)
        return done
