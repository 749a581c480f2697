"""The question vectors of one partition of the QA bank (a scope, for one model)."""

from __future__ import annotations

import hnswlib
import numpy as np

__all__ = ["Partition"]


class Partition:
    """The question vectors of one scope, searched exactly while there are at most
    ``exact_limit`` of them and through an HNSW index (labels = entry ids) beyond."""

    def __init__(self, dim: int, exact_limit: int) -> None:
        self._exact_limit = exact_limit
        self._vectors = np.zeros((16, dim), dtype=np.float32)
        self._ids = np.zeros(16, dtype=np.int64)
        self._row: dict[int, int] = {}
        self._hnsw: hnswlib.Index | None = None

    def __len__(self) -> int:
        return len(self._row)

    def add(self, entry_id: int, vector: np.ndarray) -> None:
        n = len(self._row)
        if n == len(self._ids):
            self._vectors = np.concatenate([self._vectors, np.zeros_like(self._vectors)])
            self._ids = np.concatenate([self._ids, np.zeros_like(self._ids)])
        self._vectors[n], self._ids[n], self._row[entry_id] = vector, entry_id, n
        if self._hnsw is not None:
            if self._hnsw.element_count >= self._hnsw.max_elements:
                self._hnsw.resize_index(2 * self._hnsw.max_elements)
            self._hnsw.add_items(vector[None], [entry_id], num_threads=1, replace_deleted=True)

    def remove(self, entry_id: int) -> None:
        row, last = self._row.pop(entry_id), len(self._row)
        if row != last:  # move the last row into the hole
            moved = int(self._ids[last])
            self._vectors[row], self._ids[row], self._row[moved] = self._vectors[last], moved, row
        if self._hnsw is not None:
            self._hnsw.mark_deleted(entry_id)

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` most similar entries as ``(id, cosine)``, best first (ties: lower id)."""
        n = len(self._row)
        k = min(k, n)
        if k == 0:
            return []
        if n <= self._exact_limit:
            self._hnsw = None
            rows = np.arange(n)
        else:
            rows = self._approximate(vector, k)
        sims = self._vectors[rows] @ vector
        order = np.lexsort((self._ids[rows], -sims))[:k]
        return [(int(self._ids[rows[i]]), float(sims[i])) for i in order]

    def _approximate(self, vector: np.ndarray, k: int) -> np.ndarray:
        if self._hnsw is None:
            n, dim = len(self._row), self._vectors.shape[1]
            self._hnsw = hnswlib.Index(space="cosine", dim=dim)
            self._hnsw.init_index(
                max_elements=2 * n, M=16, ef_construction=100, allow_replace_deleted=True
            )
            self._hnsw.add_items(self._vectors[:n], self._ids[:n], num_threads=1)
        self._hnsw.set_ef(max(64, 4 * k))
        try:
            labels, _ = self._hnsw.knn_query(vector[None], k=k)
        except RuntimeError:  # the walk found fewer than k live items: scan exactly
            return np.arange(len(self._row))
        return np.array([self._row[int(label)] for label in labels[0]])
