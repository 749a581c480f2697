"""The batched retrieval of the re-check (``percache_retrieve_batch``: one BM25 pass, one HNSW
query, one fusion for every stored question) ranks as one search per question (randomized
banks: small vocabularies so that scores tie, several scopes so that HNSW walks are filtered,
removed chunks so that slots are reused, and a bank large enough for HNSW to be approximate).
The stale sets are compared in ``test_recheck_equivalence``."""

from __future__ import annotations

import random
from typing import Any

import pytest

from percache_plugin.rag.chunking import Chunk
from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.index import HybridIndex
from percache_plugin.rag.ranking import BM25Ranker, tokenize

SCOPES = [None, "a", "b"]


def _words(rng: random.Random, vocab: list[str], n: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(n))


def _rank_many(ranker: BM25Ranker, queries: list[str], scope: str | None,
               n: int) -> list[list[tuple[str, float]]]:
    """``top_many``'s arrays as ``rank``'s lists: (chunk id, score), rows past the matches dropped."""
    rows, scores = ranker.top_many(queries, scope, n)
    return [[(ranker.ids[r], float(s)) for r, s in zip(row, srow, strict=True) if r >= 0]
            for row, srow in zip(rows, scores, strict=True)]


@pytest.mark.parametrize("seed", range(4))
def test_top_many_is_rank_of_each_query(seed: int) -> None:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(rng.randint(4, 40))]
    corpus = [(f"c{i}", rng.choice(SCOPES), tokenize(_words(rng, vocab, rng.randint(0, 25))))
              for i in range(rng.randint(1, 60))]
    ranker = BM25Ranker(lambda: corpus)
    queries = [_words(rng, vocab + ["unseen"], rng.randint(0, 8)) for _ in range(40)]
    for scope in [*SCOPES, "nowhere"]:
        for n in (1, 3, 50):
            assert _rank_many(ranker, queries, scope, n) == [ranker.rank(q, scope, n) for q in queries]


@pytest.mark.parametrize(("seed", "chunks"), [(0, 40), (1, 40), (2, 900)])
def test_search_many_is_search_of_each_query(seed: int, chunks: int) -> None:
    rng = random.Random(seed)
    embedder = HashEmbedder(32)
    vocab = [f"w{i}" for i in range(30)]
    texts = [_words(rng, vocab, rng.randint(3, 12)) for _ in range(chunks)]
    index = HybridIndex(32)
    index.add([Chunk(f"c{i}", "d", i, t, rng.choice(SCOPES)) for i, t in enumerate(texts)],
              embedder.embed(texts))
    index.remove([f"c{i}" for i in rng.sample(range(chunks), chunks // 5)])  # reused slots
    queries = [_words(rng, vocab, rng.randint(1, 6)) for _ in range(60)]
    vectors = embedder.embed(queries)
    for scope in SCOPES:
        one_by_one = [index.search(q, v, 3, scope=scope) for q, v in zip(queries, vectors, strict=True)]
        assert index.search_many(list(zip(queries, vectors, strict=True)), 3, scope=scope) == one_by_one


class ShortWalks:
    """hnswlib's index, except that a filtered walk always comes short (hnswlib raises
    RuntimeError when a filtered walk finds fewer than k items: rare, and hard to provoke)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def knn_query(self, data: Any, k: int = 1, num_threads: int = -1, filter: Any = None) -> Any:
        if filter is not None:
            raise RuntimeError("Cannot return the results in a contiguous 2D array")
        return self.inner.knn_query(data, k=k, num_threads=num_threads)


def test_search_many_scans_exactly_where_a_filtered_walk_comes_short() -> None:
    rng = random.Random(5)
    embedder = HashEmbedder(32)
    vocab = [f"w{i}" for i in range(30)]
    texts = [_words(rng, vocab, rng.randint(3, 12)) for _ in range(60)]
    index = HybridIndex(32)
    index.add([Chunk(f"c{i}", "d", i, t, rng.choice(SCOPES)) for i, t in enumerate(texts)],
              embedder.embed(texts))
    index._hnsw = ShortWalks(index._hnsw)  # several scopes: every walk is filtered
    queries = [_words(rng, vocab, rng.randint(1, 6)) for _ in range(20)]
    pairs = list(zip(queries, embedder.embed(queries), strict=True))
    for scope in SCOPES:
        many = index.search_many(pairs, 3, scope=scope)
        assert many == [index.search(q, v, 3, scope=scope) for q, v in pairs]
        assert any(many)
