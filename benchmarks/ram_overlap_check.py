"""RAM-tier hits with ``Config.kv_overlap_reads`` on and off, side by side in one process.

SmolLM2 over bench ttft's prompt (system + 8 QMSum transcript chunks + question): the store is
filled once; then, per round and per setting, a handle with a 256 MiB RAM tier answers once
(untimed: it fills the tier) and ``--timed`` times more (timed: time to the first token, and the
RAM hits). Prints each setting's TTFTs (per round, the first timed request first) and medians.

    python benchmarks/ram_overlap_check.py --data ../shared/data/qmsum --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from percache_plugin import enable
from percache_plugin.bench.common import transcript_chunks
from percache_plugin.bench.ttft import SYSTEM
from percache_plugin.bundled import load_smollm2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="QMSum folder")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each setting once per round")
    ap.add_argument("--timed", type=int, default=3, help="timed requests per handle")
    args = ap.parse_args()
    torch.set_num_threads(1)
    chunks, query = transcript_chunks(args.data, 8, 170)
    model, tok = load_smollm2(status=False)
    segments = [SYSTEM, *chunks, query]
    gen = {"max_new_tokens": 1, "do_sample": False}
    runs: dict[bool, list[list[float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="percache-ram-overlap-") as store:
        pc = enable(model, tok, store=store, ram_cache_bytes=0)
        pc.generate(segments, **gen)
        pc.close()
        for _ in range(args.rounds):
            for overlap in (True, False):
                ram = enable(model, tok, store=store, ram_cache_bytes=1 << 28, kv_overlap_reads=overlap)
                ram.generate(segments, **gen)
                stats = [ram.generate(segments, **gen).stats for _ in range(args.timed)]
                ram.close()
                runs[overlap].append([s.ttft_s for s in stats])
                print(f"kv_overlap_reads={overlap}: TTFT {[round(s.ttft_s, 3) for s in stats]} s, "
                      f"RAM hits {[s.ram_hits for s in stats]} of {stats[0].nodes_reused} nodes")
    for overlap, rounds in runs.items():
        flat = [t for r in rounds for t in r]
        print(f"kv_overlap_reads={overlap}: median {statistics.median(flat):.3f} s "
              f"(range {min(flat):.3f}-{max(flat):.3f}; first timed requests "
              f"{[round(r[0], 3) for r in rounds]})")


if __name__ == "__main__":
    main()
