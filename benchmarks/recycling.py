"""Exact-prefix recycling of plain prompts on SmolLM2 (pc.complete): TTFT without and with the
shared prefix cached, for a few-shot preamble and a growing transcript (the seed's workloads).

    python benchmarks/recycling.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

import torch

import percache_plugin as percache
from percache_plugin.bundled import load_smollm2

FEW_SHOT = "".join(f"Q: What is the capital of country number {i}? A: City {i}.\n" for i in range(40))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tok = load_smollm2()
    out = {}
    with tempfile.TemporaryDirectory() as store:
        pc = percache.enable(model, tok, store=store)
        cold, warm, reused, n = [], [], [], 0
        for r in range(args.repeats):
            with pc.disabled():
                g = pc.complete(FEW_SHOT + f"Q: What is the capital of country number {100 + r}? A:", max_new_tokens=1)
                cold.append(g.stats.ttft_s)
            pc.complete(FEW_SHOT + "Q: warm-up? A:", max_new_tokens=1)
            g = pc.complete(FEW_SHOT + f"Q: What is the capital of country number {200 + r}? A:", max_new_tokens=1)
            warm.append(g.stats.ttft_s)
            reused.append(g.stats.tokens_reused)
            n = g.stats.prompt_tokens
        out["few_shot"] = {"prompt_tokens": n, "tokens_reused": reused[-1], "ttft_plain_s": statistics.median(cold),
                           "ttft_recycled_s": statistics.median(warm)}
        transcript = FEW_SHOT
        cold, warm, reused = [], [], []
        for i in range(args.repeats):
            transcript += f"User: turn {i} says something new about the plan.\nAssistant: Noted {i}.\n"
            with pc.disabled():
                cold.append(pc.complete(transcript, max_new_tokens=1).stats.ttft_s)
            g = pc.complete(transcript, max_new_tokens=1)
            warm.append(g.stats.ttft_s)
            reused.append(g.stats.tokens_reused)
            n = g.stats.prompt_tokens
        out["growing_transcript"] = {"prompt_tokens": n, "tokens_reused": reused[-1],
                                     "ttft_plain_s": statistics.median(cold), "ttft_recycled_s": statistics.median(warm)}
        pc.close()
    for v in out.values():
        v["latency_reduction"] = 1 - v["ttft_recycled_s"] / v["ttft_plain_s"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
