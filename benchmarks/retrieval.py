"""Retrieval quality on QMSum: BM25 alone, embeddings alone, and their fusion.

For each meeting: chunk it on turn boundaries, embed the chunks once, build one
``HybridIndex`` per retriever, and ask every specific query that has gold turn spans.
Retrievers: BM25 alone, embeddings alone, plain RRF (``rrf_k=60``, equal weights) and the
index default (weighted RRF; ``--rrf-k`` / ``--bm25-weight`` / ``--vector-weight``
override it).
The gold chunks are those overlapping any span. Metrics, averaged over queries:

- hit@k: share of queries with at least one gold chunk in the top k;
- gold recall@k: share of a query's gold chunks in the top k (bounded by k / #gold);
- MRR@10: reciprocal rank of the first gold chunk in the top 10 (0 if none).

A "random" row gives the expected hit@k of k chunks drawn uniformly, as a floor.

Example::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/retrieval.py \\
        --data ../shared/data/qmsum --split test --target-words 100 --k 3
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from math import comb
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.index import HybridIndex
from percache_plugin.rag.qmsum import chunk_meeting, chunks_for_spans, iter_meetings

MRR_DEPTH = 10
PLAIN_RRF: dict[str, Any] = {"fusion": "rrf", "rrf_k": 60, "bm25_weight": 1.0, "vector_weight": 1.0}


@dataclass
class Tally:
    hits: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)

    def add(self, ranked: list[str], gold: set[str], k: int) -> None:
        top = ranked[:k]
        self.hits.append(float(any(c in gold for c in top)))
        self.recall.append(sum(c in gold for c in top) / len(gold))
        first = next((i for i, c in enumerate(ranked[:MRR_DEPTH], 1) if c in gold), None)
        self.rr.append(0.0 if first is None else 1.0 / first)

    def summary(self) -> dict[str, float]:
        return {
            "hit_at_k": float(np.mean(self.hits)),
            "gold_recall_at_k": float(np.mean(self.recall)),
            "mrr_at_10": float(np.mean(self.rr)),
        }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="QMSum root (holding ALL/) or ALL/"
    )
    parser.add_argument("--split", default="test", choices=["train", "val", "test"])
    parser.add_argument("--limit", type=int, default=None, help="first N meetings only")
    parser.add_argument("--target-words", type=int, default=100)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument(
        "--candidates", type=int, default=50, help="per-ranker candidates before fusion"
    )
    parser.add_argument(
        "--rrf-k", type=int, default=None, help="hybrid row (default: index default)"
    )
    parser.add_argument("--bm25-weight", type=float, default=None, help="hybrid row RRF weight")
    parser.add_argument("--vector-weight", type=float, default=None, help="hybrid row RRF weight")
    parser.add_argument(
        "--embedder", default=None, help="embedder spec (default: all-MiniLM-L6-v2)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    embedder = load_embedder(args.embedder)
    meetings = list(iter_meetings(args.data, args.split))[: args.limit]
    overrides = {
        "rrf_k": args.rrf_k,
        "bm25_weight": args.bm25_weight,
        "vector_weight": args.vector_weight,
    }
    hybrid = {key: value for key, value in overrides.items() if value is not None}
    probe = HybridIndex(2, **hybrid)  # resolves the index defaults for the label and report
    bm25_weight, vector_weight = probe.weights
    resolved = {
        "fusion": "rrf",
        "rrf_k": probe.rrf_k,
        "bm25_weight": bm25_weight,
        "vector_weight": vector_weight,
    }
    variants: dict[str, dict[str, Any]] = {
        "BM25": {"fusion": "bm25"},
        "embeddings": {"fusion": "vector"},
        "RRF k=60, equal weights": PLAIN_RRF,
        f"hybrid{'' if hybrid else ' (default)'}: weighted RRF k={probe.rrf_k}, "
        f"weights BM25 {bm25_weight:g} / vector {vector_weight:g}": resolved,
    }
    tallies = {name: Tally() for name in variants}
    random_hits: list[float] = []
    n_chunks: list[int] = []
    n_gold: list[int] = []
    embed_s = 0.0
    start = time.perf_counter()
    for meeting in tqdm(meetings, desc=f"QMSum {args.split}", unit="meeting"):
        chunks = chunk_meeting(meeting, args.target_words)
        queries = [q for q in meeting.queries if q.kind == "specific" and q.spans]
        if not queries:
            continue
        t0 = time.perf_counter()
        chunk_vectors = embedder.embed([c.text for c in chunks])
        query_vectors = embedder.embed([q.text for q in queries])
        embed_s += time.perf_counter() - t0
        indexes = {name: HybridIndex(embedder.dim, **kwargs) for name, kwargs in variants.items()}
        for index in indexes.values():
            index.add(chunks, chunk_vectors)
        total = len(indexes["BM25"])
        n_chunks.append(total)
        for query, vector in zip(queries, query_vectors, strict=True):
            gold = {c.id for c in chunks_for_spans(chunks, query.spans)}
            n_gold.append(len(gold))
            k = min(args.k, total)
            random_hits.append(1.0 - comb(total - len(gold), k) / comb(total, k))
            for name, index in indexes.items():
                hits = index.search(query.text, vector, k=MRR_DEPTH, candidates=args.candidates)
                tallies[name].add([h.chunk_id for h in hits], gold, args.k)
    elapsed = time.perf_counter() - start
    results = {name: tally.summary() for name, tally in tallies.items()}
    report = {
        "split": args.split,
        "meetings": len(n_chunks),
        "queries": len(n_gold),
        "target_words": args.target_words,
        "k": args.k,
        "candidates": args.candidates,
        "variants": variants,
        "embedder": embedder.name,
        "chunks_per_meeting": float(np.mean(n_chunks)),
        "gold_chunks_per_query": float(np.mean(n_gold)),
        "random_hit_at_k": float(np.mean(random_hits)),
        "results": results,
        "embed_seconds": embed_s,
        "total_seconds": elapsed,
    }
    print(
        f"\nQMSum {args.split}: {report['meetings']} meetings, {report['queries']} specific queries, "
        f"{report['chunks_per_meeting']:.0f} chunks/meeting (~{args.target_words} words), "
        f"{report['gold_chunks_per_query']:.1f} gold chunks/query, embedder {embedder.name}\n"
    )
    print(f"| retriever | hit@{args.k} | gold recall@{args.k} | MRR@10 |")
    print("|---|---|---|---|")
    print(f"| random | {report['random_hit_at_k']:.3f} | | |")
    for name, row in results.items():
        print(
            f"| {name} | {row['hit_at_k']:.3f} | {row['gold_recall_at_k']:.3f} | {row['mrr_at_10']:.3f} |"
        )
    print(f"\nembedding {embed_s:.0f} s, total {elapsed:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2), "utf-8")


if __name__ == "__main__":
    main()
