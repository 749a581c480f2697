"""The cost of a forward that verifies ``k`` draft tokens, against a one-token forward, with
SmolLM2-135M over a realistic cache (QMSum text, ``--cached`` tokens): what draft lengths can pay.

A forward feeds the pending token plus ``k`` draft tokens (``k = 0`` is plain decoding), keeps
``k + 1`` logits (``logits_to_keep``, as the drafted decoding loop does), and the cache is cropped
back afterwards. The values of ``k`` are interleaved in every repeat; medians and minima.

    python benchmarks/verify_cost.py [--cached 1500] [--max-k 16] [--repeats 15] [--threads 1]

Prints a table and, with ``--json``, writes the per-k medians (``percache_plugin.decode.cost``
reads such a curve as a :class:`~percache_plugin.decode.cost.VerifyCost`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from percache_plugin.bench.common import DEFAULT_QMSUM
from percache_plugin.bundled import load_smollm2
from percache_plugin.rag.qmsum import iter_meetings, meeting_text


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM)
    p.add_argument("--cached", type=int, default=1500, help="tokens in the cache")
    p.add_argument("--max-k", type=int, default=16)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    text = meeting_text(next(iter(iter_meetings(args.data))))
    ids = tok(text, add_special_tokens=False)["input_ids"][:args.cached + args.max_k + 1]
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids[:args.cached]]), past_key_values=cache, use_cache=True)
        ks = list(range(args.max_k + 1))
        times: dict[int, list[float]] = {k: [] for k in ks}
        for r in range(args.repeats + 2):  # two warm-up rounds
            for k in (ks if r % 2 == 0 else ks[::-1]):
                feed = torch.tensor([ids[args.cached:args.cached + k + 1]])
                t0 = time.perf_counter()
                model(input_ids=feed, past_key_values=cache, use_cache=True, logits_to_keep=k + 1)
                dt = time.perf_counter() - t0
                cache.crop(-(k + 1))
                if r >= 2:
                    times[k].append(dt)
    base = statistics.median(times[0])
    print(f"SmolLM2-135M, {args.cached} cached tokens, {args.threads} thread(s), {args.repeats} repeats")
    print("| k (draft tokens) | median ms | min ms | median / one-token forward |")
    print("|---|---|---|---|")
    rows = {}
    for k in ks:
        med = statistics.median(times[k])
        rows[k] = med / base
        print(f"| {k} | {med * 1e3:.1f} | {min(times[k]) * 1e3:.1f} | {med / base:.2f} |")
    if args.json is not None:
        args.json.write_text(json.dumps({"cached": args.cached, "threads": args.threads,
                                         "one_token_ms": base * 1e3, "ratio": rows}, indent=1))


if __name__ == "__main__":
    main()
