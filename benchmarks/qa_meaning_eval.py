"""QA-bank meaning guards: false hits on opposite meanings and on a different question about
the same person and thing, hit rate on paraphrases, at the default tau.

Sets (``benchmarks/data``), each split into ``dev`` (tuned on) and ``heldout`` (not):

- ``polarity``, ``antonym``, ``object`` (``qa_opposites.json``, hand-written): the stored
  question and its opposite (negated; a word swapped for its opposite; another event or
  object of the same kind).
- ``same_topic`` (``qa_locomo_negatives.json``, written by this script with ``--write-negatives`` from LoCoMo
  ``locomo_dev5.json``): two questions of one conversation that name the same people
  (key terms agree), share a content word (the thing asked about) and have different
  answers ("Did she make the bowl?" / "What is her bowl a reminder of?"). Conversations
  conv-44, conv-47, conv-48 are dev; conv-49, conv-50 heldout. Adversarial questions
  (category 5, no answer) are left out.
- Positives: ``paraphrase`` rows of ``qa_opposites.json``, the hand-written LoCoMo
  paraphrases (``qa_locomo_paraphrases.json``), 30 paraphrases of QMSum val-split queries
  (``qa_paraphrases_dev.json``, ``qmsum_paraphrase/dev``: tuned on) and the 78 QMSum
  test-split paraphrases (``qmsum_paraphrase/test``: never tuned on)
  (``qa_paraphrases.json``; the QMSum bank here holds every query of the meeting, scoped,
  without the retrieval-consistency guard: see ``qa_eval.py`` for the full QMSum run).

Each negative pair is one bank holding the stored question (with an answer), asked the
probe: any served answer is a false hit. Each positive is asked of a bank holding the
original (for QMSum and LoCoMo: every question of its meeting or conversation, scoped);
serving the original's answer is a hit. Every lookup goes through ``QABank.lookup``.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_meaning_eval.py \\
        --locomo ../shared/data/locomo/locomo_dev5.json --qmsum ../shared/data/qmsum
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from percache_plugin.rag.embeddings import Embedder, load_embedder
from percache_plugin.rag.guards import (
    DEFAULT_MEANING_GUARDS,
    DEFAULT_TAU,
    MEANING_GUARDS,
    question_terms,
)
from percache_plugin.rag.joint import FLOOR as JOINT_FLOOR
from percache_plugin.rag.meaning import question_shape
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.qmsum import iter_meetings

DATA_DIR = Path(__file__).resolve().parent / "data"
DEV_SAMPLES = ("conv-44", "conv-47", "conv-48")
# setting -> (key-terms guard, meaning guards)
SETTINGS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "similarity only": (False, ()),
    "key terms (before)": (True, ()),
    **{f"key terms + {g}": (True, (g,)) for g in MEANING_GUARDS if g != "lexical"},
    "key terms + meaning without roles (before)": (
        True, tuple(sorted(DEFAULT_MEANING_GUARDS - {"roles"}))),
    "key terms + meaning (default)": (True, tuple(sorted(DEFAULT_MEANING_GUARDS))),
    "key terms + meaning + residue (opt-in)": (True, (*sorted(DEFAULT_MEANING_GUARDS), "residue")),
    "key terms + meaning + align (opt-in)": (True, (*sorted(DEFAULT_MEANING_GUARDS), "align")),
    "key terms + meaning + combined (opt-in)": (True, (*sorted(DEFAULT_MEANING_GUARDS),
                                                       "combined")),
    f"key terms + meaning + joint (opt-in, tau {JOINT_FLOOR})": (
        True, (*sorted(DEFAULT_MEANING_GUARDS), "joint")),
    "key terms + meaning + lexical (opt-in)": (True, (*sorted(DEFAULT_MEANING_GUARDS), "lexical")),
    f"key terms + meaning + joint + lexical (opt-in, tau {JOINT_FLOOR})": (
        True, (*sorted(DEFAULT_MEANING_GUARDS), "joint", "lexical")),
    "key terms + meaning + words": (True, tuple(g for g in MEANING_GUARDS if g != "lexical")),
}
# Settings run at their own tau (the joint guard is fitted for a lower one); the others: --tau.
SETTING_TAU = {name: JOINT_FLOOR for name in SETTINGS if f"tau {JOINT_FLOOR}" in name}
_GENERIC = frozenset("thing kind type way time activity event name someone something".split())


def _norm(text: object) -> str:
    return " ".join(re.findall(r"\w+", str(text).lower()))


def locomo_negatives(path: Path) -> list[dict[str, object]]:
    """Same-person, same-thing, different-answer pairs of each conversation (stored first);
    ``qa`` holds the two questions' positions in the sample's ``qa`` list."""
    out: list[dict[str, object]] = []
    for sample in json.loads(path.read_text("utf-8")):
        qas = [(n, q) for n, q in enumerate(sample["qa"])
               if q.get("category") != 5 and q.get("answer") is not None]
        feats = []
        for _, q in qas:
            key = question_terms(q["question"]).key
            content = question_shape(q["question"]).content - key - _GENERIC
            feats.append((key, content))
        for i, (n, a) in enumerate(qas):
            for j in range(i + 1, len(qas)):
                m, b = qas[j]
                if feats[i][0] != feats[j][0] or not feats[i][0]:
                    continue  # another person: the key-terms guard's job
                if not feats[i][1] & feats[j][1] or _norm(a["answer"]) == _norm(b["answer"]):
                    continue
                if _norm(a["question"]) == _norm(b["question"]):
                    continue
                split = "dev" if sample["sample_id"] in DEV_SAMPLES else "heldout"
                out.append({"kind": "same_topic", "sample": sample["sample_id"], "qa": [n, m],
                            "stored": a["question"], "probe": b["question"], "split": split})
    return out


def _embed(embedder: Embedder, texts: list[str], cache: Path | None) -> np.ndarray:
    tag = hashlib.sha256("\n".join([embedder.name, *texts]).encode()).hexdigest()[:16]
    path = None if cache is None else cache / f"qa-meaning-{tag}.npy"
    if path is not None and path.is_file():
        return np.load(path, allow_pickle=False)
    vectors = embedder.embed(texts)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors, allow_pickle=False)
    return vectors


def _bank(embedder: Embedder) -> QABank:
    return QABank(None, embedder, byte_limit=None)


def run(args: argparse.Namespace) -> dict[str, object]:
    embedder = load_embedder(None if args.embedder == "default" else args.embedder)
    opposites = json.loads((DATA_DIR / "qa_opposites.json").read_text("utf-8"))["pairs"]
    same = locomo_negatives(args.locomo)
    rows = ",\n".join(json.dumps([p["sample"], p["split"], *p["qa"]]) for p in same)
    text = ('{"about": "Same-topic, different-question negatives generated by benchmarks/'
            'qa_meaning_eval.py from LoCoMo locomo_dev5.json (see its docstring): [sample_id, '
            'split, position of the stored question, position of the asked question] in the '
            'sample\'s qa list.",\n "pairs": [\n' + rows + "\n]}\n")
    committed = DATA_DIR / "qa_locomo_negatives.json"
    if args.write_negatives:
        committed.write_text(text, "utf-8")
    elif not committed.is_file() or committed.read_text("utf-8") != text:
        raise SystemExit(f"{committed} differs from the pairs generated from {args.locomo}: "
                         "another LoCoMo file, or the generation changed (--write-negatives "
                         "rewrites it)")
    loco = json.loads(args.locomo.read_text("utf-8"))
    loco_q = {s["sample_id"]: [(q["question"], str(q.get("answer"))) for q in s["qa"]
                               if q.get("category") != 5] for s in loco}
    para = json.loads((DATA_DIR / "qa_locomo_paraphrases.json").read_text("utf-8"))["pairs"]
    qm_pairs = json.loads((DATA_DIR / "qa_paraphrases.json").read_text("utf-8"))["pairs"]
    meetings = {m.id: m for m in iter_meetings(args.qmsum, "test")} if args.qmsum else {}
    qm_dev = json.loads((DATA_DIR / "qa_paraphrases_dev.json").read_text("utf-8"))["pairs"]
    val = {m.id: m for m in iter_meetings(args.qmsum, "val")} if args.qmsum else {}

    texts = [p["stored"] for p in opposites + same] + [p["probe"] for p in opposites + same]
    texts += [q for s in loco_q.values() for q, _ in s] + [p["paraphrase"] for p in para]
    for p in qm_pairs:
        if p["meeting"] in meetings:
            texts += [q.text for q in meetings[p["meeting"]].queries] + [p["paraphrase"]]
    for p in qm_dev:
        if p["meeting"] in val:
            texts += [q.text for q in val[p["meeting"]].queries] + [p["paraphrase"]]
    texts = list(dict.fromkeys(texts))
    vec = dict(zip(texts, _embed(embedder, texts, args.cache), strict=True))

    # (set, split) -> list of (bank, stored answer or None, probe)
    cases: dict[tuple[str, str], list[tuple[QABank, str | None, str]]] = defaultdict(list)
    for p in opposites + same:
        bank = _bank(embedder)
        bank.add(p["stored"], "stored answer", embedding=vec[p["stored"]])
        positive = p["kind"] == "paraphrase"
        cases[(p["kind"], p["split"])].append((bank, "stored answer" if positive else None,
                                               p["probe"]))
    scoped = _bank(embedder)
    for sample, qs in loco_q.items():
        for q, a in qs:
            scoped.add(q, a, scope=sample, embedding=vec[q])
    answers = {(s, q): a for s, qs in loco_q.items() for q, a in qs}
    for p in para:
        cases[("locomo_paraphrase", p["split"])].append(
            (scoped, answers[(p["sample"], p["query"])], f"{p['sample']}\n{p['paraphrase']}"))
    # QMSum val-split paraphrases are the dev positives the guards are tuned on; test: never.
    for pairs, found, split in ((qm_pairs, meetings, "test"), (qm_dev, val, "dev")):
        for p in pairs:
            if p["meeting"] not in found:
                continue
            m = found[p["meeting"]]
            for q in m.queries:
                scoped.add(q.text, q.answer, scope=m.id, embedding=vec[q.text])
            answer = next(q.answer for q in m.queries if q.text == p["query"])
            cases[("qmsum_paraphrase", split)].append((scoped, answer, f"{m.id}\n{p['paraphrase']}"))

    table: dict[str, dict[str, dict[str, object]]] = {}
    timing: list[float] = []
    examples: list[dict[str, object]] = []
    for setting, (terms, meaning) in SETTINGS.items():
        if args.settings and not any(s in setting for s in args.settings.split(",")):
            continue
        table[setting] = {}
        for (kind, split), rows in sorted(cases.items()):
            c: Counter[str] = Counter()
            for bank, expected, probe in rows:
                scope, _, text = probe.rpartition("\n")
                t0 = time.perf_counter()
                r = bank.lookup(text, tau=SETTING_TAU.get(setting, args.tau),
                                scope=scope or None, key_terms=terms, meaning=meaning,
                                embedding=vec[text])
                timing.append(time.perf_counter() - t0)
                served = None if r.match is None else r.match.entry.answer
                c["n"] += 1
                c["reached"] += int(r.best is not None and r.best.similarity >= args.tau)
                if expected is None:
                    c["false"] += served is not None
                    if served is not None and setting.endswith("(default)"):
                        examples.append({"set": kind, "split": split, "asked": text,
                                         "served": r.match.entry.question,  # type: ignore[union-attr]
                                         "similarity": round(r.match.similarity, 3)})  # type: ignore[union-attr]
                else:
                    c["hit"] += served == expected
                    c["wrong"] += served is not None and served != expected
            table[setting][f"{kind}/{split}"] = dict(c)
    report = {"embedder": embedder.name, "tau": args.tau, "table": table,
              "lookup_ms_median": 1000 * float(np.median(timing)),
              "false_hits_at_default": examples}
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", "utf-8")
    return report


def print_table(report: dict) -> None:
    table = report["table"]
    cols = list(next(iter(table.values())))
    print(f"embedder {report['embedder']}, tau {report['tau']}; negatives: false hits / n "
          "(n reaching tau); positives: hit rate (wrong answers)\n")
    first = next(iter(table.values()))
    print("| setting | " + " | ".join(f"{c} (n={first[c]['n']}, >=tau {first[c]['reached']})"
                                     for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for setting, row in table.items():
        cells = []
        for c in cols:
            r = row[c]
            if "hit" in r or "wrong" in r or c.split("/")[0].endswith("paraphrase"):
                cells.append(f"{r.get('hit', 0) / r['n']:.0%} ({r.get('wrong', 0)})")
            else:
                cells.append(f"{r.get('false', 0)} ({r.get('false', 0) / r['n']:.1%})")
        print(f"| {setting} | " + " | ".join(cells) + " |")
    print(f"\nmedian QABank.lookup: {report['lookup_ms_median']:.2f} ms")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--locomo", type=Path,
                   default=Path("../shared/data/locomo/locomo_dev5.json"), help="LoCoMo json")
    p.add_argument("--qmsum", type=Path, default=None,
                   help="QMSum root (holding ALL/) for the 78 QMSum paraphrases")
    p.add_argument("--embedder", default="default", help="'default' (all-MiniLM-L6-v2) or 'hash'")
    p.add_argument("--tau", type=float, default=DEFAULT_TAU)
    p.add_argument("--cache", type=Path, default=None, help="folder to cache embeddings in")
    p.add_argument("--json", type=Path, default=None, help="also write every number here")
    p.add_argument("--write-negatives", action="store_true",
                   help="rewrite benchmarks/data/qa_locomo_negatives.json from --locomo "
                        "(otherwise the run stops if the generated pairs differ from it)")
    p.add_argument("--settings", default="",
                   help="comma-separated parts of setting names: run only those settings")
    return p.parse_args()


if __name__ == "__main__":
    run(parse_args())
