"""BM25 scores from cached per-token terms are rank_bm25's own, so re-checking stored answers
after a document is added or removed marks stale exactly the answers it marked when every
retrieval scored with ``BM25Okapi.get_scores``; and the batched re-check (every question of a
scope retrieved at once: ``KnowledgeBank.retrieve_many``) marks the same answers as one
retrieval per answer (randomized cases, small vocabularies so that scores tie and top-k move)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.index import HybridIndex
from percache_plugin.rag.knowledge import KnowledgeBank
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.qa_recheck import Recheck
from percache_plugin.rag.ranking import BM25Ranker, fuse, tokenize

SCOPES = [None, "a", "b"]


def _words(rng: random.Random, vocab: list[str], n: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(n))


def _reference_bm25(corpus: list[tuple[str, str | None, list[str]]], query: str, scope: str | None,
                    n: int) -> list[tuple[str, float]]:
    """The ranking as every retrieval computed it before: ``BM25Okapi.get_scores``."""
    tokens = tokenize(query)
    if not tokens or not any(t for _, _, t in corpus):
        return []
    scores = np.asarray(BM25Okapi([t for _, _, t in corpus]).get_scores(tokens), dtype=np.float64)
    keep = (scores > 0) & (np.array([s for _, s, _ in corpus], dtype=object) == scope)
    idx = np.flatnonzero(keep)
    idx = idx[np.lexsort((idx, -scores[idx]))][:n]
    return [(corpus[i][0], float(scores[i])) for i in idx]


@pytest.mark.parametrize("seed", range(6))
def test_bm25_ranker_scores_are_get_scores_across_changes(seed: int) -> None:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(rng.randint(4, 40))]
    corpus: list[tuple[str, str | None, list[str]]] = []
    ranker = BM25Ranker(lambda: corpus)
    for step in range(12):
        if corpus and rng.random() < 0.3:
            corpus.pop(rng.randrange(len(corpus)))
        else:
            corpus.append((f"c{step}", rng.choice(SCOPES), tokenize(_words(rng, vocab, rng.randint(0, 25)))))
        ranker.invalidate()
        for _ in range(15):
            query, scope = _words(rng, vocab + ["unseen"], rng.randint(1, 8)), rng.choice(SCOPES)
            assert ranker.rank(query, scope, 50) == _reference_bm25(corpus, query, scope, 50)


def test_fuse_limit_keeps_the_best_hits_of_the_whole_order() -> None:
    rng = random.Random(3)
    for _ in range(50):
        ids = [f"c{i}" for i in range(12)]
        bm25 = [(c, float(rng.randint(1, 3))) for c in rng.sample(ids, 6)]
        dense = [(c, rng.random()) for c in rng.sample(ids, 6)]
        args = {"fusion": "rrf", "weights": (0.5, 1.0), "rrf_k": 5, "label": ids.index, "big": 13}
        whole = fuse(bm25, dense, **args)  # type: ignore[arg-type]
        assert fuse(bm25, dense, limit=3, **args) == whole[:3]  # type: ignore[arg-type]


def _reference_retrieve(kb: KnowledgeBank, embedder: HashEmbedder, question: str, k: int,
                        scope: str | None) -> list[str]:
    """The knowledge bank's retrieval, its BM25 scored by get_scores. The dense ranking comes
    from a vector-only index of the same chunks (exact: fewer chunks than HNSW's ``ef``)."""
    index, chunks = kb.index, kb.chunks()
    dense_index = HybridIndex(index.dim, fusion="vector")
    dense_index.add(chunks, index.vectors([c.id for c in chunks]))
    eligible = sum(c.scope == scope for c in chunks)
    if not eligible:
        return []
    vector = embedder.embed([question])[0]
    dense = [(h.chunk_id, h.score) for h in dense_index.search(question, vector, min(50, eligible), scope=scope)]
    corpus = [(c.id, c.scope, tokenize(c.text)) for c in chunks]
    order = {c.id: i for i, c in enumerate(chunks)}  # insertion order, as the index's labels
    bm25_weight, vector_weight = index.weights
    hits = fuse(_reference_bm25(corpus, question, scope, 50), dense, fusion=index.fusion,
                weights=(bm25_weight, vector_weight), rrf_k=index.rrf_k, label=order.__getitem__,
                big=len(chunks) + 1)
    return [h.chunk_id for h in hits[:k]]


@pytest.mark.parametrize("seed", range(4))
def test_stale_set_after_a_change_is_the_per_question_get_scores_one(seed: int) -> None:
    rng = random.Random(seed)
    embedder, k = HashEmbedder(64), 3
    vocab = [f"w{i}" for i in range(25)]
    kb = KnowledgeBank(None, embedder, chunk_words=12)
    docs = [{"text": _words(rng, vocab, rng.randint(8, 30)), "id": f"d{i}"} for i in range(10)]
    for doc in docs:
        kb.add_documents([doc], scope=rng.choice(SCOPES))
    banks = [QABank(None, embedder, byte_limit=None) for _ in range(3)]
    for _ in range(60):  # both banks hold the same answers, sources their retrieval now
        q, scope = _words(rng, vocab, rng.randint(2, 6)) + "?", rng.choice(SCOPES)
        sources = [c.id for c in kb.retrieve(q, k, scope=scope)]
        for bank in banks:
            bank.add(q, "an answer", scope=scope, sources=sources)
    marked_any, batches = False, []
    for step in range(4):
        if step % 2:
            kb.remove_document(f"d{rng.randrange(10)}", None)
            kb.remove_chunks([rng.choice(kb.chunk_ids())])
            new: list[str] = []
        else:
            report = kb.add_documents([{"text": _words(rng, vocab, 20), "id": f"x{step}"}],
                                      scope=rng.choice(SCOPES))
            new = [c.id for c in report.new_chunks]

        def now(q: str, scope: str | None, vector: np.ndarray | None) -> list[str]:
            return [c.id for c in kb.retrieve(q, k, scope=scope, query_embedding=vector)]

        def before(q: str, scope: str | None, vector: np.ndarray | None) -> list[str]:
            return _reference_retrieve(kb, embedder, q, k, scope)

        def batched(items: Sequence[Recheck]) -> list[list[str] | None]:  # one batch per scope
            out: list[list[str] | None] = [None] * len(items)
            for scope in SCOPES:
                mine = [i for i, (_, s, _) in enumerate(items) if s == scope]
                asked = [(items[i][0], embedder.embed([items[i][0]])[0] if items[i][2] is None
                          else items[i][2]) for i in mine]
                batches.append(len(asked))
                for i, chunks in zip(mine, kb.retrieve_many(asked, k, scope=scope), strict=True):
                    out[i] = [c.id for c in chunks]
            return out

        marked = banks[0].mark_stale_for(new, now)
        assert marked == banks[1].mark_stale_for(new, before)
        assert marked == banks[2].mark_stale_for(new, retrieve_many=batched)
        marked_any = marked_any or bool(marked)
    assert marked_any  # the premise: some answers' top-k moved
    assert max(batches) > 1  # the premise: questions were retrieved together
    kb.close()
