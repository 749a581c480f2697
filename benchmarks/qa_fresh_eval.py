"""The QA-bank meaning guards on a held-out check: ``benchmarks/data/qa_fresh_heldout.json``
(built before the ``combined`` guard was developed) or, with ``--set
qa_fresh2_heldout.json``, the second one (written before the ``roles`` guard was developed),
or ``--set qa_fresh3_heldout.json``, the third (written before the guards it reports on were
developed), or ``--set qa_fresh4_heldout.json``, the fourth (written before the lexical guard's
second revision), or ``--set qa_fresh5_heldout.json``, the fifth (written before the changes of
docs/BENCHMARKS.md's "the known gaps, and a fifth fresh check"); each file's ``about`` field says
how it was made. ``--show SETTING`` lists,
for one setting, each negative served and each paraphrase missed (for development on sets
already seen).

Negatives (one bank per pair, holding the stored question with an answer; any answer served
for the asked question is a false hit): ``qmsum_negatives``, two different queries of one QMSum
train-split meeting sharing a long clause (hand-written in the second set); ``locomo_negatives``,
hand-written different questions about the same person and thing of LoCoMo conv-49/50 (in the
second set each of a stated kind, counted per kind below the table). Positives: ``qmsum_paraphrases``
(the bank holds every query of the meeting, scoped to it) and ``locomo_paraphrases`` (every
question of the conversation but category 5, scoped); a hit serves the original question's
entry. Every lookup goes through ``QABank.lookup`` at tau 0.74 (the joint guard's row: at its
floor, 0.66) with the key-terms guard.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_fresh_eval.py \\
        --locomo ../shared/data/locomo/locomo_dev5.json --qmsum ../shared/data/qmsum \\
        [--set qa_fresh2_heldout.json | ... | --set qa_fresh5_heldout.json] [--show SETTING]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.guards import DEFAULT_MEANING_GUARDS, DEFAULT_TAU
from percache_plugin.rag.joint import FLOOR as JOINT_FLOOR
from percache_plugin.rag.lexical import find_swap
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.qa_embedded import EMBEDDED_GUARDS
from percache_plugin.rag.qa_types import LookupResult
from percache_plugin.rag.qmsum import iter_meetings

DATA = Path(__file__).resolve().parent / "data"
BASE = tuple(sorted(DEFAULT_MEANING_GUARDS - EMBEDDED_GUARDS))
SETTINGS = {
    "defaults without roles": tuple(sorted(DEFAULT_MEANING_GUARDS - {"roles"})),
    "defaults": tuple(sorted(DEFAULT_MEANING_GUARDS)),
    **{f"defaults + {g}": (*BASE, g) for g in ("residue", "align", "combined")
       if g not in DEFAULT_MEANING_GUARDS},
    f"defaults + joint, tau {JOINT_FLOOR}": (*BASE, "joint"),
    "defaults + lexical": (*BASE, "lexical"),
    f"defaults + joint + lexical, tau {JOINT_FLOOR}": (*BASE, "joint", "lexical"),
}
# Settings run at their own tau (the joint guard is fitted for a lower one); the others: --tau.
SETTING_TAU = {name: JOINT_FLOOR for name in SETTINGS if f"tau {JOINT_FLOOR}" in name}
SETS = ("qmsum_negatives", "locomo_negatives", "qmsum_paraphrases", "locomo_paraphrases")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo/locomo_dev5.json"))
    p.add_argument("--qmsum", type=Path, default=Path("../shared/data/qmsum"))
    p.add_argument("--tau", type=float, default=DEFAULT_TAU)
    p.add_argument("--set", default="qa_fresh_heldout.json",
                   help="file of benchmarks/data holding the four sets")
    p.add_argument("--show", default="", metavar="SETTING",
                   help="print, for this setting, each negative served and each paraphrase "
                        "missed (with the guard that refused it and the lexical guard's swap)")
    args = p.parse_args()
    data = json.loads((DATA / args.set).read_text("utf-8"))
    embedder = load_embedder(None)
    meetings = {m.id: m for m in iter_meetings(args.qmsum, "train")}
    loco = {s["sample_id"]: [q["question"] for q in s["qa"] if q.get("category") != 5]
            for s in json.loads(args.locomo.read_text("utf-8"))}
    scoped: dict[str, list[str]] = {}
    for row in data["qmsum_paraphrases"]:
        scoped[row["meeting"]] = list(dict.fromkeys(q.text for q in meetings[row["meeting"]].queries))
    for row in data["locomo_paraphrases"]:
        scoped[row["sample"]] = list(dict.fromkeys(loco[row["sample"]]))
    texts = [q for qs in scoped.values() for q in qs]
    for name in SETS:
        for row in data[name]:
            texts += [row.get("stored") or row["query"], row.get("probe") or row["paraphrase"]]
    texts = list(dict.fromkeys(texts))
    vec = dict(zip(texts, embedder.embed(texts), strict=True))
    bank = QABank(None, embedder, byte_limit=None)
    for scope, qs in scoped.items():
        for q in qs:
            bank.add(q, f"answer to: {q}", scope=scope, embedding=vec[q])
    cases: dict[str, list[tuple[QABank, str | None, str, str | None, str]]] = {
        s: [] for s in SETS}
    for name in ("qmsum_negatives", "locomo_negatives"):
        for row in data[name]:
            single = QABank(None, embedder, byte_limit=None)
            single.add(row["stored"], "stored answer", embedding=vec[row["stored"]])
            cases[name].append((single, None, row["probe"], None, row.get("kind", "")))
    for name, key in (("qmsum_paraphrases", "meeting"), ("locomo_paraphrases", "sample")):
        for row in data[name]:
            cases[name].append((bank, f"answer to: {row['query']}", row["paraphrase"], row[key],
                                ""))
    table: dict[str, dict[str, Counter[str]]] = {}
    kinds: dict[str, Counter[str]] = {}
    for setting, meaning in SETTINGS.items():
        table[setting] = {}
        kinds[setting] = Counter()
        for name, rows in cases.items():
            c: Counter[str] = Counter()
            tau = SETTING_TAU.get(setting, args.tau)
            for b, expected, probe, scope, kind in rows:
                r = b.lookup(probe, tau=tau, scope=scope, meaning=meaning,
                             embedding=vec[probe])
                served = None if r.match is None else r.match.entry.answer
                c["n"] += 1
                c["reached"] += int(r.best is not None and r.best.similarity >= args.tau)
                if setting == args.show:
                    _show(name, kind, probe, expected, r, served)
                if expected is None:
                    c["false"] += served is not None
                    if kind:
                        kinds[setting][f"{name}/{kind}"] += served is not None
                        kinds[setting][f"{name}/{kind}/n"] += 1
                else:
                    c["hit"] += served == expected
                    c["wrong"] += served is not None and served != expected
            table[setting][name] = c
    first = table["defaults"]
    print(f"tau {args.tau}; negatives: false hits (rate); positives: hit rate (wrong answers)\n")
    print("| setting | " + " | ".join(f"{s} (n={first[s]['n']}, >=tau {first[s]['reached']})"
                                     for s in SETS) + " |")
    print("|---|" + "---|" * len(SETS))
    for setting, row in table.items():
        cells = [f"{row[s]['false']} ({row[s]['false'] / row[s]['n']:.1%})" if "negatives" in s
                 else f"{row[s]['hit']} ({row[s]['hit'] / row[s]['n']:.0%}) ({row[s]['wrong']})"
                 for s in SETS]
        print(f"| {setting} | " + " | ".join(cells) + " |")
    names = sorted({k[:-2] for k in kinds["defaults"] if k.endswith("/n")})
    if names:
        print("\nnegatives served per kind\n")
        print("| setting | " + " | ".join(f"{k} (n={kinds['defaults'][k + '/n']})"
                                         for k in names) + " |")
        print("|---|" + "---|" * len(names))
        for setting, row in kinds.items():
            print(f"| {setting} | " + " | ".join(str(row[k]) for k in names) + " |")


def _show(name: str, kind: str, probe: str, expected: str | None, r: LookupResult,
          served: str | None) -> None:
    """One line per negative served or paraphrase missed (``--show``)."""
    best = r.best
    stored = "" if best is None else best.entry.question
    sim = 0.0 if best is None else best.similarity
    if expected is None and served is not None:
        print(f"SERVED {name}/{kind} {sim:.2f} {stored!r} <- {probe!r}")
    elif expected is not None and served != expected:
        swap = None if best is None else find_swap(probe, stored)
        print(f"MISSED {name} {sim:.2f} by {r.rejected_by} swap {swap} {stored!r} <- {probe!r}")


if __name__ == "__main__":
    main()
