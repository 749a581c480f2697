"""BM25 ranking (rebuilt after the corpus changes) and reciprocal-rank fusion."""

from __future__ import annotations

from percache_plugin.rag.ranking import BM25Ranker, fuse, tokenize


def test_bm25_rebuilds_after_invalidate_and_filters_scope() -> None:
    corpus = [("a", None, tokenize("the budget meeting")), ("b", "x", tokenize("budget review")),
              ("d", None, tokenize("unrelated words here"))]
    ranker = BM25Ranker(lambda: corpus)
    assert [cid for cid, _ in ranker.rank("budget", None, 5)] == ["a"]
    corpus.append(("c", None, tokenize("budget budget plan")))
    assert [cid for cid, _ in ranker.rank("budget", None, 5)] == ["a"]  # not invalidated yet
    ranker.invalidate()
    assert [cid for cid, _ in ranker.rank("budget", None, 5)] == ["c", "a"]
    assert ranker.rank("nothing shared", None, 5) == []


def test_rrf_weights_and_ties() -> None:
    bm25 = [("a", 3.0), ("b", 2.0)]
    dense = [("b", 0.9), ("c", 0.8)]
    hits = fuse(bm25, dense, fusion="rrf", weights=(0.5, 1.0), rrf_k=5,
                label={"a": 0, "b": 1, "c": 2}.__getitem__, big=4)
    assert [h.chunk_id for h in hits] == ["b", "c", "a"]
    assert hits[0].score == 0.5 / 7 + 1.0 / 6 and (hits[0].bm25_rank, hits[0].vector_rank) == (2, 1)
    only = fuse(bm25, dense, fusion="bm25", weights=(0.5, 1.0), rrf_k=5, label=lambda c: 0, big=4)
    assert [(h.chunk_id, h.score) for h in only] == [("a", 3.0), ("b", 2.0)]
