"""How often adding a document moves a stored question's top-k without retrieving the new document.

The QA bank serves a stored answer while its question retrieves the chunks the answer was
generated from. Adding a document reweighs BM25 (a word's weight falls as more chunks hold it),
so a question's top-k can change though none of the new chunks enters it. This counts, on
QMSum, for every meeting series added meeting by meeting into one scope, the questions of the
meetings added so far whose top-k changes when the next meeting is added:

- ``new_in_top_k``: a new chunk is among them (the only case marked stale before the fix);
- ``moved_without_new``: the top-k changed, no new chunk among them (served stale before);
- ``unchanged``.

No model: the knowledge bank alone (MiniLM embeddings, the bank's default fusion, ``--k``).

Example::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/retrieval_drift.py \\
        --data ../shared/data/qmsum --split test --k 3 --series 8
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.knowledge import KnowledgeBank
from percache_plugin.rag.qmsum import iter_series, meeting_text


def drift(args: argparse.Namespace) -> dict[str, object]:
    embedder = load_embedder(args.embedder)
    counts: Counter[str] = Counter()
    series_used = 0
    for _, meetings in iter_series(args.data, args.split):
        if len(meetings) < 2:
            continue
        series_used += 1
        bank = KnowledgeBank(None, embedder, chunk_words=args.chunk_words)
        asked: list[str] = []
        for meeting in meetings:
            before = {q: {c.id for c in bank.retrieve(q, args.k, scope="s")} for q in asked}
            report = bank.add_documents([{"text": meeting_text(meeting), "id": meeting.id}], scope="s")
            new = {c.id for c in report.new_chunks}
            for q, old in before.items():
                now = {c.id for c in bank.retrieve(q, args.k, scope="s")}
                counts["new_in_top_k" if now & new else "moved_without_new" if now != old else "unchanged"] += 1
            asked += [q.text for q in meeting.queries]
        bank.close()
        if series_used >= args.series:
            break
    total = sum(counts.values())
    return {"series": series_used, "checks": total, **dict(counts),
            "moved_without_new_share": counts["moved_without_new"] / total if total else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/qmsum")
    parser.add_argument("--split", default="test")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--chunk-words", type=int, default=100)
    parser.add_argument("--series", type=int, default=8, help="meeting series to replay")
    parser.add_argument("--embedder", default=None, help="None: the default MiniLM")
    print(json.dumps(drift(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
