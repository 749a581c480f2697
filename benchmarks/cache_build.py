"""Building a request's cache from stored chunks: ``kv.cache.cache_from_chunks`` (one copy per
layer, kept by ``AdoptingLayer``) against filling a ``DynamicCache`` through ``Cache.update``
(which concatenates the chunks' copy onto an empty tensor: a second copy). SmolLM2-135M shapes
(30 layers, 3 K/V heads, 64 dims, fp32), 10 chunks of 2,003 tokens; interleaved, min and median.

    python benchmarks/cache_build.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from transformers import DynamicCache

from percache_plugin.kv.cache import cache_from_chunks
from percache_plugin.kv.chunk import ChunkKV

SIZES = (19, *(223,) * 8, 200)


def through_update(chunks: list[ChunkKV]) -> Any:
    cache = DynamicCache()
    for layer in range(len(chunks[0].keys)):
        k = torch.cat([c.keys[layer] for c in chunks], dim=1)
        v = torch.cat([c.values[layer] for c in chunks], dim=1)
        cache.update(k.unsqueeze(0), v.unsqueeze(0), layer)
    return cache


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(1)
    chunks = [ChunkKV(tuple(torch.randn(3, n, 64) for _ in range(30)),
                      tuple(torch.randn(3, n, 64) for _ in range(30))) for n in SIZES]
    arms = {"Cache.update": through_update,
            "cache_from_chunks": lambda c: cache_from_chunks(c, torch.float32, torch.device("cpu"))}
    times: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(args.repeats):
        for name, build in arms.items():
            t0 = time.perf_counter()
            build(chunks)
            times[name].append(time.perf_counter() - t0)
    a, b = (build(chunks) for build in arms.values())
    assert all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
               for x, y in zip(a.layers, b.layers, strict=True))
    mib = sum(c.nbytes for c in chunks) / 2**20
    for name, t in times.items():
        print(f"{name}: min {min(t) * 1000:.1f} ms, median {statistics.median(t) * 1000:.1f} ms "
              f"({mib:.0f} MiB, {sum(SIZES)} tokens)")


if __name__ == "__main__":
    main()
