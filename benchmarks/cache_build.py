"""Building a request's cache from stored chunks and appending the first forward's 19 new
tokens to every layer (``Cache.update``, as the model does): ``kv.cache.cache_from_chunks``
(``DeferredLayer``: the chunks and the new tokens concatenated in that first update, one copy)
against ``concat+update`` (the chunks concatenated, then filled through ``Cache.update``, which
concatenates them onto an empty tensor, then the first update concatenates again: three copies)
and ``concat once`` (the chunks concatenated into the layers, then the first update: two
copies, the build before ``DeferredLayer``). SmolLM2-135M shapes (30 layers, 3 K/V heads, 64
dims, fp32), 10 chunks of 2,003 tokens; interleaved, min and median.

    python benchmarks/cache_build.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

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


def concat_once(chunks: list[ChunkKV]) -> Any:
    cache = DynamicCache()
    for layer in range(len(chunks[0].keys)):
        k = torch.cat([c.keys[layer] for c in chunks], dim=1).unsqueeze(0)
        v = torch.cat([c.values[layer] for c in chunks], dim=1).unsqueeze(0)
        cache.layers.append(DynamicLayer())
        cache.layers[-1].lazy_initialization(k, v)
        cache.layers[-1].keys, cache.layers[-1].values = k, v
    return cache


def first_forward(cache: Any) -> Any:
    new = torch.randn(1, 3, 19, 64)
    for layer in range(len(cache.layers)):
        cache.update(new, new, layer)
    return cache


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(1)
    chunks = [ChunkKV(tuple(torch.randn(3, n, 64) for _ in range(30)),
                      tuple(torch.randn(3, n, 64) for _ in range(30))) for n in SIZES]
    arms = {"concat+update": lambda c: first_forward(through_update(c)),
            "concat once": lambda c: first_forward(concat_once(c)),
            "cache_from_chunks": lambda c: first_forward(cache_from_chunks(c, torch.float32, torch.device("cpu")))}
    times: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(args.repeats):
        for name, build in arms.items():
            t0 = time.perf_counter()
            build(chunks)
            times[name].append(time.perf_counter() - t0)
    built = [b(chunks) for b in (through_update, concat_once,
                                 lambda c: cache_from_chunks(c, torch.float32, torch.device("cpu")))]
    assert all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
               for other in built[1:] for x, y in zip(built[0].layers, other.layers, strict=True))
    mib = sum(c.nbytes for c in chunks) / 2**20
    for name, t in times.items():
        print(f"{name}: min {min(t) * 1000:.1f} ms, median {statistics.median(t) * 1000:.1f} ms "
              f"({mib:.0f} MiB, {sum(SIZES)} tokens)")


if __name__ == "__main__":
    main()
