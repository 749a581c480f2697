"""What the opt-in meaning guards cost per QA-bank lookup, side by side.

A scoped bank holds the stored questions of the LoCoMo same-topic pairs
(``qa_locomo_negatives.json``, both splits) and the originals of the LoCoMo paraphrases, with
their answers; the probes are the asked questions of those pairs that are not stored themselves
and the paraphrases, their embeddings computed beforehand (``ask()`` embeds the question once
for retrieval and the bank anyway). Each probe is looked up with the default meaning guards and
with the residue, the align, the combined, the joint guard (at its own tau, 0.66), the lexical
guard, or joint and lexical added, alternating (WordNet is read before the timing starts), ``--repeats`` times; the table gives the median
``QABank.lookup`` time of each, over all probes and over the probes whose best candidate reaches
tau (only those make the guards embed), and the embedder calls the guard made.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_residue_cost.py \\
        --locomo ../shared/data/locomo/locomo_dev5.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.guards import DEFAULT_MEANING_GUARDS, DEFAULT_TAU
from percache_plugin.rag.joint import FLOOR as JOINT_FLOOR
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.qa_embedded import EMBEDDED_GUARDS
from percache_plugin.rag.wordnet import load_wordnet

DATA = Path(__file__).resolve().parent / "data"


class Counting:
    """An embedder that counts its calls."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.calls = inner, 0
        self.name, self.dim = inner.name, inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return self.inner.embed(texts)

    def embed_words(self, texts: Sequence[str]) -> list[tuple[tuple[str, ...], np.ndarray]]:
        self.calls += 1
        return self.inner.embed_words(texts)  # type: ignore[no-any-return]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo/locomo_dev5.json"))
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    embedder = Counting(load_embedder(None))
    samples = {s["sample_id"]: s for s in json.loads(args.locomo.read_text("utf-8"))}
    pairs = json.loads((DATA / "qa_locomo_negatives.json").read_text())["pairs"]
    para = json.loads((DATA / "qa_locomo_paraphrases.json").read_text())["pairs"]
    qa = {(sid, q["question"]): str(q.get("answer")) for sid, s in samples.items() for q in s["qa"]}
    kept = {(s, samples[s]["qa"][i]["question"]) for s, _, i, _ in pairs}
    kept |= {(p["sample"], p["query"]) for p in para}
    stored = [(sid, q, qa[(sid, q)]) for sid, q in sorted(kept)]
    probes = [(s, samples[s]["qa"][j]["question"]) for s, _, _, j in pairs]
    probes = [p for p in dict.fromkeys(probes) if p not in kept]
    probes += [(p["sample"], p["paraphrase"]) for p in para]
    texts = list(dict.fromkeys([q for _, q, _ in stored] + [q for _, q in probes]))
    vec = dict(zip(texts, embedder.inner.embed(texts), strict=True))
    bank = QABank(None, embedder, byte_limit=None)
    for sid, q, a in stored:
        bank.add(q, a, scope=sid, embedding=vec[q])
    settings = {"default": tuple(sorted(DEFAULT_MEANING_GUARDS - EMBEDDED_GUARDS))}
    settings["default + residue"] = (*settings["default"], "residue")
    settings["default + align"] = (*settings["default"], "align")
    settings["default + combined"] = (*settings["default"], "combined")
    settings[f"default + joint, tau {JOINT_FLOOR}"] = (*settings["default"], "joint")
    settings["default + lexical"] = (*settings["default"], "lexical")
    settings[f"default + joint + lexical, tau {JOINT_FLOOR}"] = (*settings["default"], "joint",
                                                                 "lexical")
    taus = {name: JOINT_FLOOR if "joint" in meaning else DEFAULT_TAU
            for name, meaning in settings.items()}
    load_wordnet()  # once per process: not a lookup's cost
    times: dict[str, list[float]] = {s: [] for s in settings}
    reach: dict[str, list[float]] = {s: [] for s in settings}
    calls = dict.fromkeys(settings, 0)
    for _ in range(args.repeats):
        for sid, q in probes:
            for name, meaning in settings.items():
                before = embedder.calls
                t0 = time.perf_counter()
                r = bank.lookup(q, tau=taus[name], scope=sid, meaning=meaning,
                                embedding=vec[q])
                ms = 1000 * (time.perf_counter() - t0)
                calls[name] += embedder.calls - before
                times[name].append(ms)
                if r.best is not None and r.best.similarity >= taus[name]:
                    reach[name].append(ms)
    print(f"{len(stored)} stored questions, {len(probes)} probes x {args.repeats} repeats, "
          f"{len(reach['default']) // args.repeats} probes reach tau {DEFAULT_TAU}\n")
    print("| meaning guards | median lookup (all) | median lookup (reaching tau) | p95 (reaching tau) "
          "| embedder calls |")
    print("|---|---|---|---|---|")
    for name in settings:
        print(f"| {name} | {np.median(times[name]):.2f} ms | {np.median(reach[name]):.2f} ms | "
              f"{np.percentile(reach[name], 95):.2f} ms | {calls[name]} |")


if __name__ == "__main__":
    main()
