"""The cold disk store of ``bench ttft`` read several ways in one process, interleaved (so the
load is the same for all). Before each request every K/V file is dropped from the page cache and
a fresh handle (``ram_cache_bytes=0``) is opened; reported: TTFT and ``stats.load_s`` (plan,
load and, for whole reads, check of the nodes), median and min.

Arms (``Config.kv_overlap_reads`` / ``Config.kv_prefetch``):

- ``layered``: the files read layer by layer in a background thread while the forward runs,
  each layer checked before its use (the default now);
- ``layered+prefetch``: the same after ``posix_fadvise(WILLNEED)`` of every planned file;
- ``whole``: every file read with one ``preadv`` and checked before the forward starts;
- ``whole+prefetch``: the same after the WILLNEED prefetch (the default before ``layered``);
- ``old``: ``whole+prefetch`` through safetensors' memory map (the reader before ``kv.node_read``;
  switched by patching ``kv.integrity.direct_read_supported``, for this measurement only).

    python benchmarks/cold_load.py [--repeats 7] [--arms layered,whole+prefetch]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from percache_plugin.bench.common import DEFAULT_QMSUM, transcript_chunks
from percache_plugin.bench.ttft import SYSTEM, drop_page_cache
from percache_plugin.bundled import load_smollm2
from percache_plugin.handle import enable
from percache_plugin.kv import integrity

ARMS: dict[str, dict[str, Any]] = {
    "layered": {"kv_overlap_reads": True, "kv_prefetch": False},
    "layered+prefetch": {"kv_overlap_reads": True, "kv_prefetch": True},
    "whole": {"kv_overlap_reads": False, "kv_prefetch": False},
    "whole+prefetch": {"kv_overlap_reads": False, "kv_prefetch": True},
    "old": {"kv_overlap_reads": False, "kv_prefetch": True},
}


@contextlib.contextmanager
def arm(name: str) -> Iterator[dict[str, Any]]:
    if name not in ARMS:
        raise SystemExit(f"unknown arm {name!r}; choose from {', '.join(ARMS)}")
    with contextlib.ExitStack() as stack:
        if name == "old":
            stack.enter_context(mock.patch.object(integrity, "direct_read_supported", lambda dtypes: False))
        yield ARMS[name]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--arms", default="layered,layered+prefetch,whole,whole+prefetch")
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM)
    args = p.parse_args()
    arms = args.arms.split(",")
    torch.set_num_threads(1)
    chunks, query = transcript_chunks(args.data, 8, 170)
    segments = [SYSTEM, *chunks, query]
    model, tok = load_smollm2()
    gen = {"max_new_tokens": 1, "do_sample": False}
    ttft: dict[str, list[float]] = {a: [] for a in arms}
    load: dict[str, list[float]] = {a: [] for a in arms}
    logits: dict[str, torch.Tensor] = {}
    with tempfile.TemporaryDirectory(prefix="percache-cold-") as store:
        pc = enable(model, tok, store=store, ram_cache_bytes=0)
        pc.generate(segments, **gen)
        pc.close()
        for _ in range(args.repeats):
            for a in arms:
                drop_page_cache(Path(store) / "kv")
                with arm(a) as config:
                    pc = enable(model, tok, store=store, ram_cache_bytes=0, **config)
                    g = pc.generate(segments, **gen)
                    pc.close()
                s = g.stats
                assert s.tokens_reused > 2000 and s.load_misses == 0 and not s.corrupt_aborts, s
                ttft[a].append(s.ttft_s)
                load[a].append(s.load_s)
                logits.setdefault(a, g.first_logits)
                assert torch.equal(logits[a], logits[arms[0]]), f"{a} differs from {arms[0]}"
    for a in arms:
        print(f"{a:18s} TTFT median {statistics.median(ttft[a]):.3f} s min {min(ttft[a]):.3f} s | "
              f"load_s median {statistics.median(load[a]) * 1e3:.1f} ms min {min(load[a]) * 1e3:.1f} ms | "
              f"TTFT runs {', '.join(f'{t:.3f}' for t in ttft[a])}")
    print("first-token logits bit-identical across arms: yes")


if __name__ == "__main__":
    main()
