"""Weighted reciprocal-rank fusion of many queries' rankings at once, in arrays: what
:func:`~percache_plugin.rag.ranking.fuse` (``fusion="rrf"``) gives each query, with the same
floats and the same order, for the re-check of every stored question after a change
(:meth:`~percache_plugin.rag.index.HybridIndex.search_many`)."""

from __future__ import annotations

import numpy as np

__all__ = ["Fused", "rrf_many"]

Fused = tuple[int, float, int | None, int | None]  # corpus row, score, BM25 rank, vector rank


def _ranks(top: np.ndarray, corpus: int, big: int) -> np.ndarray:
    """``[queries, corpus]``: each row's 1-based rank in ``top`` (rows, -1: none), else ``big``."""
    ranks = np.full((len(top), corpus + 1), big, dtype=np.int64)  # the last column takes -1
    np.put_along_axis(ranks, np.where(top < 0, corpus, top),
                      np.broadcast_to(np.arange(1, top.shape[1] + 1), top.shape), axis=1)
    ranks[:, corpus] = big
    return ranks


def rrf_many(bm25: np.ndarray, dense: np.ndarray, labels: np.ndarray, *, weights: tuple[float, float],
             rrf_k: int, big: int, limit: int) -> list[list[Fused]]:
    """Fuse each query's two rankings (``bm25``, ``dense``: ``[queries, n]`` corpus rows best
    first, -1 past the end); ``labels``: each corpus row's insertion label (the last tie
    break). Each query's best ``limit`` hits, as ``fuse`` orders them."""
    corpus = len(labels)
    b_rank, d_rank = _ranks(bm25, corpus, big), _ranks(dense, corpus, big)
    # every candidate once: the BM25 ones, then the vector ones BM25 did not rank
    cand = np.concatenate([bm25, dense], axis=1)
    col = np.where(cand < 0, corpus, cand)
    br = np.take_along_axis(b_rank, col, axis=1)
    dr = np.take_along_axis(d_rank, col, axis=1)
    valid = cand >= 0
    valid[:, bm25.shape[1]:] &= br[:, bm25.shape[1]:] == big
    # fuse's floats: 0.0, plus the BM25 term, plus the vector term (adding 0.0 is exact)
    with np.errstate(divide="ignore"):
        score = (np.where(br < big, weights[0] / (rrf_k + br), 0.0)
                 + np.where(dr < big, weights[1] / (rrf_k + dr), 0.0))
    best = np.minimum(br, dr)
    label = np.where(valid, np.append(labels, 0)[col], 0)
    key = np.where(valid, -score, np.inf)
    order = np.lexsort((label, best, key), axis=1)[:, :limit]
    out: list[list[Fused]] = []
    for q, row in enumerate(order):
        out.append([(int(cand[q, i]), float(score[q, i]),
                     int(br[q, i]) if br[q, i] < big else None, int(dr[q, i]) if dr[q, i] < big else None)
                    for i in row if valid[q, i]])
    return out
