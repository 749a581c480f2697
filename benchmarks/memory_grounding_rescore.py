"""Re-score the grounding check of extracted facts without running the model again: the facts
a ``percache bench memory --grounding 0`` run extracted (its JSON's ``examples``: every fact as
``source: text``) are checked with the grounding rule of this checkout, and the facts each
threshold keeps are matched to LoCoMo's observations, attributed by source turn, with the
bench's own match rules and thresholds (:func:`percache_plugin.bench.memory_match.calibrate`
on the other four conversations, the default embedder). The row ``prefix rule`` applies the
earlier rule (a word sharing its first five letters with a source word counts as found), so
both rules are read side by side on the same facts.

    python benchmarks/memory_grounding_rescore.py --json docs/memory_bench_dev0.json \
        --data ../shared/data/locomo/locomo_dev5.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from percache_plugin.bench.memory_data import load_conversation
from percache_plugin.bench.memory_match import attributed, calibrate, f1_matrix, match_matrix
from percache_plugin.memory.grounding import content_words, grounding
from percache_plugin.memory.text import normalize
from percache_plugin.rag.embeddings import load_embedder

THRESHOLDS = (0.0, 0.25, 0.5)


def _prefix_share(fact: str, source: str) -> float:
    """The earlier rule: same word, or the first min(5, len) letters when both have 4 or more."""
    words = content_words(fact)
    if not words:
        return 1.0
    src = set(normalize(source).split())

    def found(w: str) -> bool:
        return w in src or (len(w) >= 4 and any(
            len(s) >= 4 and w[:min(5, len(w), len(s))] == s[:min(5, len(w), len(s))] for s in src))

    return sum(map(found, words)) / len(words)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", type=Path, default=Path("docs/memory_bench_dev0.json"))
    p.add_argument("--data", type=Path, default=Path("../shared/data/locomo/locomo_dev5.json"))
    args = p.parse_args()
    run = json.loads(args.json.read_text())
    sample, n_sessions = int(run["args"]["sample"]), int(run["args"]["sessions"])
    conv = load_conversation(args.data, sample, n_sessions)
    dev = [load_conversation(args.data, s, n_sessions) for s in range(5) if s != sample]
    facts = [([x.removeprefix("c:") for x in src.split(",") if x], text)
             for src, _, text in (e.partition(": ") for e in run["examples"])]
    emb = load_embedder(None)
    thresholds = calibrate(dev, emb.embed)
    texts, obs = [t for _, t in facts], [o for o, _ in conv.observations]
    sources, turns = [s for s, _ in facts], [d for _, d in conv.observations]
    cos_a = attributed(emb.embed(texts) @ emb.embed(obs).T, sources, turns)
    f1_a = attributed(f1_matrix(texts, obs), sources, turns)
    said = {d: text for _, ts in conv.sessions for d, text in ts}

    def source(ids: list[str]) -> str:
        return " ".join(said.get(i, "") for i in ids)

    rules: dict[str, Callable[[str, str], float]] = {
        "prefix rule": _prefix_share, "stem rule (this checkout)": lambda f, s: grounding(f, s).share}
    print(f"{len(facts)} facts of conversation {sample}, {len(obs)} observations")
    print("| rule | threshold | facts kept | cosine: precision / recall | token-F1: precision / recall |")
    print("|---|---|---|---|---|")
    for name, share_of in rules.items():
        share = np.array([share_of(t, source(s)) for s, t in facts])
        for t in THRESHOLDS:
            keep = share >= t
            c = match_matrix(cos_a[keep], thresholds["cosine"])
            f = match_matrix(f1_a[keep], thresholds["token_f1"])
            print(f"| {name} | {t} | {int(keep.sum())} | {c['precision']:.2f} / {c['recall']:.2f} | "
                  f"{f['precision']:.2f} / {f['recall']:.2f} |")
        changed = [(s, t) for (s, t), a, b in zip(facts, share >= 0.25, [
            _prefix_share(t, source(s)) >= 0.25 for s, t in facts], strict=True) if a != b]
        if name != "prefix rule":
            print(f"facts whose verdict at 0.25 differs from the prefix rule: {len(changed)}")
            for s, t in changed:
                print(f"  {s}: {t}  missing now: {grounding(t, source(s)).missing}")


if __name__ == "__main__":
    main()
