"""The cold disk store of ``bench ttft`` read several ways in one process, interleaved (so the
load is the same for all): ``old``, the reader before ``kv.node_read`` (safetensors' memory
map), ``new``, one ``preadv`` per file into one buffer (the default now), both after
``posix_fadvise(WILLNEED)`` on every planned node's file (the store's prefetch); ``no-prefetch``:
``new`` without that prefetch. Before each request
every K/V file is dropped from the page cache and a fresh handle (``ram_cache_bytes=0``) is
opened; reported: TTFT and ``stats.load_s`` (plan + load + check of the nodes), median and min.

    python benchmarks/cold_load.py [--repeats 7] [--arms old,new,no-prefetch]

The readers are switched by patching ``kv.integrity.direct_read_supported`` and
``NodeFiles.prefetch``, for this measurement only.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import torch

from percache_plugin.bench.common import DEFAULT_QMSUM, transcript_chunks
from percache_plugin.bench.ttft import SYSTEM, drop_page_cache
from percache_plugin.bundled import load_smollm2
from percache_plugin.handle import enable
from percache_plugin.kv import integrity
from percache_plugin.kv.node_files import NodeFiles

ARMS = ("old", "new", "no-prefetch")


@contextlib.contextmanager
def arm(name: str) -> Iterator[None]:
    if name not in ARMS:
        raise SystemExit(f"unknown arm {name!r}; choose from {', '.join(ARMS)}")
    with contextlib.ExitStack() as stack:
        if name == "old":
            stack.enter_context(mock.patch.object(integrity, "direct_read_supported", lambda dtypes: False))
        if name == "no-prefetch":
            stack.enter_context(mock.patch.object(NodeFiles, "prefetch", lambda self, keys: 0))
        yield


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--arms", default=",".join(ARMS))
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
    with tempfile.TemporaryDirectory(prefix="percache-cold-") as store:
        pc = enable(model, tok, store=store, ram_cache_bytes=0)
        pc.generate(segments, **gen)
        pc.close()
        for _ in range(args.repeats):
            for a in arms:
                drop_page_cache(Path(store) / "kv")
                with arm(a):
                    pc = enable(model, tok, store=store, ram_cache_bytes=0)
                    s = pc.generate(segments, **gen).stats
                    pc.close()
                assert s.tokens_reused > 2000 and s.load_misses == 0, s
                ttft[a].append(s.ttft_s)
                load[a].append(s.load_s)
    for a in arms:
        print(f"{a:18s} TTFT median {statistics.median(ttft[a]):.3f} s min {min(ttft[a]):.3f} s | "
              f"load_s median {statistics.median(load[a]) * 1e3:.1f} ms min {min(load[a]) * 1e3:.1f} ms | "
              f"TTFT runs {', '.join(f'{t:.3f}' for t in ttft[a])}")


if __name__ == "__main__":
    main()
