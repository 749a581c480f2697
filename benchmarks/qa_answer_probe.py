"""Would the stored ANSWER's likelihood tell a paraphrase from a different question? A
measurement on dev data, not a guard.

For a candidate hit (stored question, its answer, the asked question), SmolLM2-135M-Instruct
scores the answer's first ``--answer-tokens`` tokens after each question (chat template, one
forward each, no decoding): ``delta`` = mean log-probability of the answer tokens under the
asked question minus under the stored one (the stored one's forward could be made once, when the
answer is stored). A paraphrase should leave the answer as likely; a different question should
make it less likely. Reported: ROC AUC of ``delta`` and, on the same pairs, of the align guard's
score (:mod:`percache_plugin.rag.align`), within each domain (the positives and negatives of one
set come from the same corpus, so answer length or style cannot separate them), and the time
per forward.

Dev pairs only, each reaching tau and passing the key-terms and the default meaning guards:
QMSum: positives are the val-split paraphrases (``qa_paraphrases_dev.json``,
``qa_paraphrases_val2.json``), negatives two different queries of one val-split meeting;
LoCoMo: positives the dev paraphrases of ``qa_locomo_paraphrases.json``, negatives the dev
same-topic pairs (``--n`` of them, drawn with seed 0).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_answer_probe.py \\
        --locomo ../shared/data/locomo/locomo_dev5.json --qmsum ../shared/data/qmsum
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
from qa_align_fit import decided, same_meeting_pairs  # benchmarks/ is sys.path[0]

from percache_plugin.bundled import load_smollm2
from percache_plugin.rag.align import alignment
from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.guards import DEFAULT_TAU
from percache_plugin.rag.qmsum import iter_meetings

DATA = Path(__file__).resolve().parent / "data"
DEV_SAMPLES = ("conv-44", "conv-47", "conv-48")

Triple = tuple[str, str, str]  # stored question, its answer, asked question


def answer_logprob(model: object, tok: object, question: str, answer: str, limit: int) -> float:
    """Mean log-probability of the answer's first ``limit`` tokens after ``question``."""
    prompt = tok.apply_chat_template(  # type: ignore[attr-defined]
        [{"role": "user", "content": question}], add_generation_prompt=True,
        return_tensors="pt", return_dict=True)["input_ids"]
    ans = tok(answer, add_special_tokens=False, return_tensors="pt")["input_ids"][:, :limit]  # type: ignore[operator]
    ids = torch.cat([prompt, ans], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, prompt.shape[1] - 1:-1]  # type: ignore[operator]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(logp.gather(1, ans[0][:, None]).mean())


def auc(pos: list[float], neg: list[float]) -> float:
    if not pos or not neg:
        return float("nan")
    return float(np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg]))


def dev_sets(locomo: Path, qmsum: Path, n: int, embedder: object,
             tau: float) -> dict[str, tuple[list[Triple], list[Triple]]]:
    samples = {s["sample_id"]: s for s in json.loads(locomo.read_text("utf-8"))}
    loco_ans = {q["question"]: str(q.get("answer")) for s in samples.values() for q in s["qa"]}
    meetings = {m.id: m for m in iter_meetings(qmsum, "val")}
    qm_ans = {q.text: q.answer for m in meetings.values() for q in m.queries}
    qm_pos = [(p["query"], p["paraphrase"]) for f in ("qa_paraphrases_dev.json", "qa_paraphrases_val2.json")
              for p in json.loads((DATA / f).read_text("utf-8"))["pairs"] if p["meeting"] in meetings]
    qm_neg = same_meeting_pairs(qmsum)
    lo_pos = [(p["query"], p["paraphrase"]) for p in
              json.loads((DATA / "qa_locomo_paraphrases.json").read_text("utf-8"))["pairs"]
              if p["split"] == "dev"]
    lo_neg = [(samples[s]["qa"][i]["question"], samples[s]["qa"][j]["question"]) for s, split, i, j in
              json.loads((DATA / "qa_locomo_negatives.json").read_text("utf-8"))["pairs"] if split == "dev"]
    texts = sorted({t for pair in qm_pos + qm_neg + lo_pos + lo_neg for t in pair})
    vec = dict(zip(texts, embedder.embed(texts), strict=True))  # type: ignore[attr-defined]

    def keep(pairs: list[tuple[str, str]], answers: dict[str, str]) -> list[Triple]:
        return [(a, answers[a], b) for a, b, _ in decided(pairs, vec, tau) if answers.get(a)]

    lo_neg_kept = keep(lo_neg, loco_ans)
    random.Random(0).shuffle(lo_neg_kept)
    return {"qmsum": (keep(qm_pos, qm_ans), keep(qm_neg, qm_ans)),
            "locomo": (keep(lo_pos, loco_ans), lo_neg_kept[:n])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo/locomo_dev5.json"))
    p.add_argument("--qmsum", type=Path, default=Path("../shared/data/qmsum"))
    p.add_argument("--n", type=int, default=40, help="LoCoMo dev negatives drawn")
    p.add_argument("--answer-tokens", type=int, default=48)
    args = p.parse_args()
    torch.set_num_threads(1)
    embedder = load_embedder(None)
    sets = dev_sets(args.locomo, args.qmsum, args.n, embedder, DEFAULT_TAU)
    model, tok = load_smollm2()
    model.eval()
    times: list[float] = []
    print("| set | positives | negatives | answer-likelihood delta AUC | align score AUC | "
          "median delta pos / neg |")
    print("|---|---|---|---|---|---|")
    for name, (pos, neg) in sets.items():
        deltas: list[list[float]] = [[], []]
        aligns: list[list[float]] = [[], []]
        for k, triples in enumerate((pos, neg)):
            for stored, answer, asked in triples:
                t0 = time.perf_counter()
                new = answer_logprob(model, tok, asked, answer, args.answer_tokens)
                times.append(time.perf_counter() - t0)
                old = answer_logprob(model, tok, stored, answer, args.answer_tokens)
                deltas[k].append(new - old)
                wa, wb = embedder.embed_words([asked, stored])  # type: ignore[attr-defined]
                aligns[k].append(alignment(wa, wb).score)
        print(f"| {name} | {len(pos)} | {len(neg)} | {auc(*deltas):.2f} | {auc(*aligns):.2f} | "
              f"{np.median(deltas[0]):.2f} / {np.median(deltas[1]):.2f} |")
    print(f"\nforward per candidate (asked question + answer): median {1000 * np.median(times):.0f} ms, "
          f"p95 {1000 * np.percentile(times, 95):.0f} ms ({len(times)} forwards, 1 thread)")


if __name__ == "__main__":
    main()
