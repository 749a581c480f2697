"""The lexical guard on dev data only: what it refuses with the defaults and with ``joint``.

Dev pairs as ``qa_joint_fit.py``: negatives, the LoCoMo same-topic pairs of conv-44/47/48;
positives, the dev rewordings, dev LoCoMo paraphrases and the QMSum val-split paraphrases
(``qa_paraphrases_dev.json``, ``qa_paraphrases_val2.json``); every ordered pair of two different
queries of one QMSum val-split meeting; and the hand-written dev swaps of
``benchmarks/data/qa_swaps_dev.json`` (one noun or verb swapped for one of its kind). Only
pairs reaching the joint guard's floor and passing the key-terms guard and the default meaning
guards matter. For each set it prints how many pairs the defaults (tau 0.74) and ``joint``
(tau 0.66) serve, without and with the ``lexical`` guard, and (``--show``) the dev positives
the lexical guard refuses. The constants of ``rag/lexical.py`` were chosen with it. The
held-out sets are not read here.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_lexical_dev.py \\
        --locomo ../shared/data/locomo/locomo_dev5.json --qmsum ../shared/data/qmsum [--show]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from qa_align_fit import same_meeting_pairs, val2_pairs  # benchmarks/ is sys.path[0]
from qa_guard_tune import dev_pairs
from qa_joint_fit import decided

from percache_plugin.rag.combined import features
from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.guards import DEFAULT_TAU
from percache_plugin.rag.joint import FLOOR, joint_score
from percache_plugin.rag.lexical import find_swap
from percache_plugin.rag.wordnet import load_wordnet

DATA = Path(__file__).resolve().parent / "data"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo/locomo_dev5.json"))
    p.add_argument("--qmsum", type=Path, default=Path("../shared/data/qmsum"))
    p.add_argument("--show", action="store_true", help="print the positives refused")
    args = p.parse_args()
    wn = load_wordnet()
    embedder = load_embedder(None)
    negs, pos = dev_pairs(args.locomo, args.qmsum)
    swaps = [(r["stored"], r["probe"])
             for r in json.loads((DATA / "qa_swaps_dev.json").read_text("utf-8"))["pairs"]]
    sets = {"negatives": negs, "positives": pos + val2_pairs(args.qmsum),
            "QMSum same-meeting": same_meeting_pairs(args.qmsum), "swaps": swaps}
    texts = sorted({t for pairs in sets.values() for pair in pairs for t in pair})
    vec = dict(zip(texts, embedder.embed(texts), strict=True))
    low = {k: decided(pairs, vec, FLOOR) for k, pairs in sets.items()}
    needed = sorted({t for rows in low.values() for a, b, _ in rows for t in (a, b)})
    words = dict(zip(needed, embedder.embed_words(needed), strict=True))  # type: ignore[attr-defined]
    print(f"floor {FLOOR}; served without / with the lexical guard\n")
    print("| set | pairs | reaching the floor and the other guards | defaults, tau "
          f"{DEFAULT_TAU} | joint, tau {FLOOR} |")
    print("|---|---|---|---|---|")
    refused_pos = []
    for name, rows in low.items():
        # the asked question first, as the QA bank calls the guards
        swap = {(a, b): find_swap(b, a, wn) for a, b, _ in rows}
        default = [(a, b) for a, b, s in rows if s >= DEFAULT_TAU]
        joint = [(a, b) for a, b, s in rows
                 if joint_score(s, features(b, words[b], a, words[a]).row()) >= 0.0]

        def cell(served: list[tuple[str, str]], swap: dict = swap) -> str:
            return f"{len(served)} / {sum(swap[pair] is None for pair in served)}"

        print(f"| {name} | {len(sets[name])} | {len(rows)} | {cell(default)} | {cell(joint)} |")
        if name == "positives":
            refused_pos = [(b, swap[(a, b)]) for a, b in joint if swap[(a, b)] is not None]
    if args.show:
        print("\ndev positives served by joint that the lexical guard refuses:")
        for asked, why in refused_pos:
            print(f"- {asked!r}: {why}")


if __name__ == "__main__":
    main()
