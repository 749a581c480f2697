"""Would the model itself tell a paraphrase from a different question? A measurement, not a
guard: for candidate hits that pass every default guard (the false hits of
``qa_meaning_eval.py`` and true paraphrases), ask SmolLM2-135M-Instruct "Do these two
questions ask for the same information? Answer yes or no." and compare the logits of " yes"
and " no" after one forward (no decoding). Reports the cost per pair and how well the
yes-minus-no margin separates the two groups.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_verify_probe.py \\
        --meaning-json /tmp/qa-meaning.json --n 40
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import torch

from percache_plugin.bundled import load_smollm2

DATA_DIR = Path(__file__).resolve().parent / "data"
PROMPT = ("Question A: {a}\nQuestion B: {b}\nDo question A and question B ask for the same "
          "information, so that one answer fits both? Answer yes or no.")


def margin(model: object, tok: object, a: str, b: str, yes: int, no: int) -> float:
    messages = [{"role": "user", "content": PROMPT.format(a=a, b=b)}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True,  # type: ignore[attr-defined]
                                  return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]  # type: ignore[operator]
    return float(logits[yes] - logits[no])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--meaning-json", type=Path, required=True,
                   help="the --json output of qa_meaning_eval.py (its false hits)")
    p.add_argument("--n", type=int, default=40, help="pairs per group")
    args = p.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(0)
    false_hits = [(e["served"], e["asked"]) for e in
                  json.loads(args.meaning_json.read_text())["false_hits_at_default"]]
    pos = [(x["query"], x["paraphrase"]) for f in ("qa_paraphrases.json",
                                                   "qa_locomo_paraphrases.json")
           for x in json.loads((DATA_DIR / f).read_text())["pairs"]]
    groups = {"paraphrase": rng.sample(pos, min(args.n, len(pos))),
              "false hit": rng.sample(false_hits, min(args.n, len(false_hits)))}
    model, tok = load_smollm2()
    yes = tok.encode("yes", add_special_tokens=False)[0]
    no = tok.encode("no", add_special_tokens=False)[0]
    margins: dict[str, list[float]] = {}
    cost: list[float] = []
    for name, pairs in groups.items():
        margins[name] = []
        for a, b in pairs:
            t0 = time.perf_counter()
            margins[name].append(margin(model, tok, a, b, yes, no))
            cost.append(time.perf_counter() - t0)
    pm, fm = np.array(margins["paraphrase"]), np.array(margins["false hit"])
    print(f"pairs: {len(pm)} paraphrases, {len(fm)} false hits of the default guards")
    print(f"forward per pair: median {1000 * np.median(cost):.0f} ms, "
          f"p95 {1000 * np.percentile(cost, 95):.0f} ms (1 thread)")
    print(f"margin yes-no: paraphrases median {np.median(pm):.2f}, false hits {np.median(fm):.2f}")
    for t in sorted({float(np.percentile(pm, q)) for q in (5, 10, 20, 30)}):
        print(f"  serve if margin >= {t:.2f}: keeps {np.mean(pm >= t):.0%} of paraphrases, "
              f"{np.mean(fm >= t):.0%} of false hits")
    auc = float(np.mean([[x > y for y in fm] for x in pm]))
    print(f"ROC AUC {auc:.2f}")


if __name__ == "__main__":
    main()
