"""Hit ratio of one trace at every cache size of ``percache bench buffer``, for the baselines or
for the adaptive LLM-aware policy alone (with which expert it followed at the end), one process
per trace so the slow traces run side by side. The same sweep as ``bench buffer`` (1 MiB blocks,
the same sizes), so the figures are the same.

    python benchmarks/buffer_policy_sweep.py kv-qmsum          # adaptive 'llm'
    python benchmarks/buffer_policy_sweep.py kv-chat --base    # lru, lfu, lecar, llm-static
    python benchmarks/buffer_policy_sweep.py path/to/trace.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

from percache_plugin.bench.buffer import SHARES
from percache_plugin.buffer.adaptive import AdaptiveLLMPolicy
from percache_plugin.buffer.cache import BufferCache, simulate
from percache_plugin.buffer.trace import Access, Tracer, blocks, read_trace
from percache_plugin.buffer.workloads import chat_trace, qmsum_like_trace


def trace(name: str) -> list[Access]:
    if name in ("kv-qmsum", "kv-chat"):
        t = Tracer()
        (qmsum_like_trace if name == "kv-qmsum" else chat_trace)(t)
        return t.accesses
    return read_trace(Path(name))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="kv-qmsum, kv-chat or a trace CSV")
    p.add_argument("--base", action="store_true", help="the baselines instead of the adaptive policy")
    p.add_argument("--half-life", type=int, default=2000)
    args = p.parse_args()
    bl = list(blocks(trace(args.trace), 1 << 20))
    distinct = len({k for k, _, _ in bl})
    print(f"{args.trace}: {len(bl)} block reads, {distinct} distinct blocks", flush=True)
    for share in SHARES:
        cap = max(1, round(distinct * share)) << 20
        if args.base:
            row = {p: round(simulate(bl, p, cap).hit_ratio * 100, 1) for p in ("lru", "lfu", "lecar", "llm-static")}
            print(f"{share:4.0%} {row}", flush=True)
            continue
        pol = AdaptiveLLMPolicy(cap, half_life=args.half_life)
        cache: BufferCache[object] = BufferCache(cap, pol)
        held = object()  # any value but None (a lookup returning None is a miss)
        for key, size, cls in bl:
            if cache.lookup(key, cls) is None:
                cache.offer(key, held, size, cls)
        print(f"{share:4.0%} llm={cache.stats.hit_ratio * 100:5.1f} {pol.report()}", flush=True)


if __name__ == "__main__":
    main()
