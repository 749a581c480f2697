"""Calibrate the relevance threshold of ask(): best cosine similarity between a question and
the chunks of the user's documents, for questions the documents answer vs questions they do not.

Relevant: QMSum questions (specific and general) against the chunks of their own meeting (val split).
Unrelated: LoCoMo questions (personal conversations about other people) against the same
meeting chunks, plus a few general-knowledge questions. Run from the repository root:

    python benchmarks/relevance_calibration.py --qmsum ../shared/data/qmsum --locomo ../shared/data/locomo
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.qmsum import chunk_meeting, iter_meetings

GENERAL = ["Who won the football world cup in 2018?", "What is the capital of Australia?",
           "How do I bake sourdough bread?", "When were the Olympic Games held in Paris?",
           "What is the boiling point of water at high altitude?", "Who wrote War and Peace?"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--qmsum", type=Path, default=Path("../shared/data/qmsum"))
    p.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo"))
    p.add_argument("--meetings", type=int, default=20)
    args = p.parse_args()
    emb = load_embedder(None)
    locomo = json.loads((args.locomo / "locomo_dev5.json").read_text())
    unrelated_q = [qa["question"] for conv in locomo for qa in conv["qa"]][:200] + GENERAL
    unrelated_v = emb.embed(unrelated_q)
    rel, unrel = [], []
    for m in list(iter_meetings(args.qmsum, "val"))[: args.meetings]:
        chunks = chunk_meeting(m, 100)
        cv = emb.embed([c.text for c in chunks])
        qs = [q.text for q in m.queries]
        if qs:
            rel.extend((emb.embed(qs) @ cv.T).max(axis=1).tolist())
        pick = np.random.default_rng(len(rel)).choice(len(unrelated_q), 20, replace=False)
        unrel.extend((unrelated_v[pick] @ cv.T).max(axis=1).tolist())
    rel_a, unrel_a = np.array(rel), np.array(unrel)
    print(f"relevant n={rel_a.size}: p1 {np.percentile(rel_a, 1):.3f} p5 {np.percentile(rel_a, 5):.3f} "
          f"median {np.median(rel_a):.3f}")
    print(f"unrelated n={unrel_a.size}: median {np.median(unrel_a):.3f} p95 {np.percentile(unrel_a, 95):.3f} "
          f"p99 {np.percentile(unrel_a, 99):.3f} max {unrel_a.max():.3f}")
    for t in (0.15, 0.2, 0.25, 0.3, 0.35):
        print(f"threshold {t:.2f}: relevant kept {np.mean(rel_a >= t):.3f}, unrelated refused {np.mean(unrel_a < t):.3f}")


if __name__ == "__main__":
    main()
