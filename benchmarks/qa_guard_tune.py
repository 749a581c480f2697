"""Choose the residue guard's threshold on dev data only, and print the trade-off curve.

Dev negatives: the LoCoMo same-topic pairs of conv-44/47/48 (``qa_locomo_negatives.json``, the
``dev`` split of ``qa_meaning_eval.py``). Dev positives: the ``dev`` rewordings of
``qa_opposites.json``, the ``dev`` LoCoMo paraphrases and the QMSum val-split paraphrases
(``qa_paraphrases_dev.json``). For each pair that reaches tau and passes every other default
guard, the residue cosine (:mod:`percache_plugin.rag.residue`) is computed; the table gives, per
threshold, the dev negatives still served and the dev positives still served. The held-out
sets (conv-49/50, the QMSum test-split paraphrases) are not read here.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_guard_tune.py \\
        --locomo ../shared/data/locomo/locomo_dev5.json --qmsum ../shared/data/qmsum
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.guards import DEFAULT_TAU, question_terms, terms_agree
from percache_plugin.rag.meaning import meaning_checks, question_shape
from percache_plugin.rag.qmsum import iter_meetings
from percache_plugin.rag.residue import residues

DATA = Path(__file__).resolve().parent / "data"
DEV_SAMPLES = ("conv-44", "conv-47", "conv-48")
OTHER_GUARDS = ("polarity", "antonym", "qtype", "object")


def dev_pairs(locomo: Path, qmsum: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(stored, asked) dev negatives and dev positives."""
    samples = {s["sample_id"]: s for s in json.loads(locomo.read_text("utf-8"))}
    negs = [(samples[s]["qa"][i]["question"], samples[s]["qa"][j]["question"])
            for s, split, i, j in json.loads((DATA / "qa_locomo_negatives.json").read_text())["pairs"]
            if split == "dev" and s in DEV_SAMPLES]
    pos = [(p["stored"], p["probe"]) for p in json.loads((DATA / "qa_opposites.json").read_text())["pairs"]
           if p["kind"] == "paraphrase" and p["split"] == "dev"]
    pos += [(p["query"], p["paraphrase"]) for p in
            json.loads((DATA / "qa_locomo_paraphrases.json").read_text())["pairs"] if p["split"] == "dev"]
    val = {m.id for m in iter_meetings(qmsum, "val")}
    pos += [(p["query"], p["paraphrase"]) for p in
            json.loads((DATA / "qa_paraphrases_dev.json").read_text())["pairs"] if p["meeting"] in val]
    return negs, pos


def residue_cosines(pairs: list[tuple[str, str]], embedder, tau: float) -> list[float]:  # type: ignore[no-untyped-def]
    """The residue cosine of each pair that reaches tau and passes the other default guards."""
    texts = sorted({t for p in pairs for t in p})
    vec = dict(zip(texts, embedder.embed(texts), strict=True))
    out = []
    for a, b in pairs:
        sa, sb = question_shape(a), question_shape(b)
        if float(vec[a] @ vec[b]) < tau or not terms_agree(question_terms(a), question_terms(b)):
            continue
        if not all(meaning_checks(sa, sb, OTHER_GUARDS).values()):
            continue
        ra, rb = residues(sa, sb)
        out.append(1.0 if not ra or not rb else float(np.dot(*embedder.embed([ra, rb]))))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo/locomo_dev5.json"))
    p.add_argument("--qmsum", type=Path, default=Path("../shared/data/qmsum"))
    p.add_argument("--tau", type=float, default=DEFAULT_TAU)
    args = p.parse_args()
    embedder = load_embedder(None)
    negs, pos = dev_pairs(args.locomo, args.qmsum)
    n_cos, p_cos = residue_cosines(negs, embedder, args.tau), residue_cosines(pos, embedder, args.tau)
    print(f"dev negatives {len(negs)} ({len(n_cos)} reach tau and pass the other guards); "
          f"dev positives {len(pos)} ({len(p_cos)})\n")
    print("| residue threshold | dev negatives served | dev positives served |")
    print("|---|---|---|")
    for t in (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5):
        fn = sum(c >= t for c in n_cos)
        fp = sum(c >= t for c in p_cos)
        print(f"| {t:.2f} | {fn} ({fn / len(negs):.1%}) | {fp} / {len(pos)} ({fp / len(pos):.0%}) |")


if __name__ == "__main__":
    main()
