"""The rankers of the hybrid index and their fusion: BM25 over word tokens (rank_bm25),
rebuilt lazily after the corpus changed, and weighted reciprocal-rank fusion of two rankings.

Pure of the index's storage: :class:`~percache_plugin.rag.index.HybridIndex` owns the chunks
and the HNSW graph and calls these.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from rank_bm25 import BM25Okapi

__all__ = ["BM25Ranker", "Fusion", "Hit", "fuse", "tokenize"]

Fusion = Literal["rrf", "bm25", "vector"]
_WORD = re.compile(r"\w+")
_TERM_CACHE_FLOATS = 1 << 22  # 32 MiB of cached token scores at most
_BATCH_FLOATS = 1 << 21  # scores of a batch of queries held at once: 16 MiB


def tokenize(text: str) -> list[str]:
    """BM25 tokens: lower-cased runs of word characters."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Hit:
    """A search result. Ranks are 1-based positions in each ranker's candidate list
    (``None``: not among that ranker's candidates, or the ranker was not used)."""

    chunk_id: str
    score: float
    bm25_rank: int | None
    vector_rank: int | None


class BM25Ranker:
    """BM25Okapi over a corpus of token lists. BM25Okapi is static: :meth:`invalidate` marks
    the corpus changed and the next :meth:`rank` rebuilds it from ``corpus()``."""

    def __init__(self, corpus: Callable[[], Sequence[tuple[str, str | None, list[str]]]]) -> None:
        self._corpus = corpus  # (chunk id, scope, tokens), in insertion order
        self._bm25: BM25Okapi | None = None
        self._ids: list[str] = []
        self._scopes: np.ndarray = np.zeros(0, dtype=object)
        self._terms: dict[str, np.ndarray] = {}  # a token's score per chunk, until the corpus changes
        self._postings: dict[str, tuple[list[int], list[int]]] = {}  # token -> chunk rows, counts
        self._norm: np.ndarray = np.zeros(0)
        self._stale = True

    def invalidate(self) -> None:
        self._stale = True

    def rank(self, query: str, scope: str | None, n: int) -> list[tuple[str, float]]:
        """At most ``n`` (chunk id, BM25 score) of ``scope`` sharing a token with ``query``,
        best first, then insertion order."""
        tokens = tokenize(query)
        if not tokens:
            return []
        if self._stale:
            self._rebuild()
        if self._bm25 is None:
            return []
        scores = np.zeros(len(self._ids))
        for token in tokens:  # BM25Okapi.get_scores's sum, in its order: the same floats
            scores += self._term(token)
        keep = scores > 0  # rank_bm25 floors idf above 0, so > 0 means a shared token
        keep &= self._scopes == scope  # elementwise, None included
        idx = np.flatnonzero(keep)
        idx = idx[np.lexsort((idx, -scores[idx]))][:n]  # score desc, then insertion order
        return [(self._ids[i], float(scores[i])) for i in idx]

    @property
    def ids(self) -> list[str]:
        """The chunk id of each corpus row (:meth:`top_many`'s rows), as last rebuilt."""
        return self._ids

    def top_many(self, queries: Sequence[str], scope: str | None, n: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`rank` of each query, scored together, as arrays: the corpus rows (:attr:`ids`)
        ranked, ``[len(queries), n]``, -1 past the chunks sharing a token, and their scores.
        Each distinct token's term is gathered once, over the chunks of ``scope`` only, and each
        query's scores are summed in its own token order: the same floats, order and ties."""
        tokens = [tokenize(q) for q in queries]
        if self._stale:
            self._rebuild()
        cols = np.flatnonzero(self._scopes == scope)  # elementwise, None included
        rows = np.full((len(tokens), n), -1, dtype=np.int64)
        top_scores = np.zeros((len(tokens), n))
        if self._bm25 is None or not len(cols):
            return rows, top_scores
        vocab = {t: i for i, t in enumerate(dict.fromkeys(t for ts in tokens for t in ts), 1)}
        terms = np.zeros((len(vocab) + 1, len(cols)))  # row 0: no token (adding 0.0 is exact)
        for token, row in vocab.items():
            terms[row] = self._term(token)[cols]
        width = max(map(len, tokens), default=0)
        step = max(1, _BATCH_FLOATS // len(cols))
        for start in range(0, len(tokens), step):
            block = tokens[start:start + step]
            index = np.zeros((len(block), width), dtype=np.int64)
            for i, ts in enumerate(block):
                index[i, :len(ts)] = [vocab[t] for t in ts]
            scores = np.zeros((len(block), len(cols)))
            for j in range(width):
                scores += terms[index[:, j]]
            # score desc, then insertion order (stable); a chunk scoring 0 shares no token
            order = np.argsort(-scores, axis=1, kind="stable")[:, :n]
            best = np.take_along_axis(scores, order, axis=1)
            width_n = order.shape[1]
            rows[start:start + len(block), :width_n] = np.where(best > 0, cols[order], -1)
            top_scores[start:start + len(block), :width_n] = np.where(best > 0, best, 0.0)
        return rows, top_scores

    def _rebuild(self) -> None:
        corpus = list(self._corpus())
        self._ids = [cid for cid, _, _ in corpus]
        self._scopes = np.array([scope for _, scope, _ in corpus], dtype=object)
        # BM25Okapi divides by the average length: it cannot take an all-empty corpus.
        has_tokens = any(tokens for _, _, tokens in corpus)
        self._bm25 = BM25Okapi([tokens for _, _, tokens in corpus]) if has_tokens else None
        self._terms, self._postings = {}, {}
        if self._bm25 is not None:
            bm25 = self._bm25
            for i, doc in enumerate(bm25.doc_freqs):
                for token, count in doc.items():
                    self._postings.setdefault(token, ([], []))[0].append(i)
                    self._postings[token][1].append(count)
            # get_scores computes this array for every token: the same floats, once
            self._norm = bm25.k1 * (1 - bm25.b + bm25.b * np.array(bm25.doc_len) / bm25.avgdl)
        self._stale = False

    def _term(self, token: str) -> np.ndarray:
        """One token's term of ``BM25Okapi.get_scores``, computed as it does (same floats), once
        per corpus and from the postings: get_scores walks every chunk's word counts in Python
        for each token of each query, and re-checking every stored question after a change
        scores the same words again and again."""
        term = self._terms.get(token)
        if term is None:
            bm25 = self._bm25
            assert bm25 is not None
            freq = np.zeros(len(self._ids), dtype=np.int64)  # get_scores's counts, from the postings
            rows, counts = self._postings.get(token, ((), ()))
            freq[list(rows)] = counts
            term = (bm25.idf.get(token) or 0) * (freq * (bm25.k1 + 1) / (freq + self._norm))
            if len(self._terms) * len(self._ids) >= _TERM_CACHE_FLOATS:
                self._terms.clear()
            self._terms[token] = term
        return term


def fuse(bm25: list[tuple[str, float]], dense: list[tuple[str, float]], *, fusion: Fusion,
         weights: tuple[float, float], rrf_k: int, label: Callable[[str], int], big: int,
         limit: int | None = None) -> list[Hit]:
    """Fuse two rankings (see :class:`~percache_plugin.rag.index.HybridIndex`). Ties keep the
    better single rank (``big`` stands for "not ranked"), then ``label`` (insertion order).
    ``limit``: only the best ``limit`` hits are built."""
    bm25_rank = {cid: r for r, (cid, _) in enumerate(bm25, 1)}
    dense_rank = {cid: r for r, (cid, _) in enumerate(dense, 1)}
    if fusion == "rrf":
        scores = {cid: 0.0 for cid in [*bm25_rank, *dense_rank]}
        for ranks, weight in zip((bm25_rank, dense_rank), weights, strict=True):
            for cid, r in ranks.items():
                scores[cid] += weight / (rrf_k + r)
    else:
        scores = dict(bm25 if fusion == "bm25" else dense)

    def order(cid: str) -> tuple[float, int, int]:
        best = min(bm25_rank.get(cid, big), dense_rank.get(cid, big))
        return (-scores[cid], best, label(cid))

    return [Hit(cid, float(scores[cid]), bm25_rank.get(cid), dense_rank.get(cid))
            for cid in sorted(scores, key=order)[:limit]]
