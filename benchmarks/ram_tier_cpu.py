"""RAM-tier hits against the in-memory ceiling in CPU time, side by side in one process.

bench ttft's RAM tier and ceiling arms (SmolLM2, the same 2,022-token prompt: system + 8 QMSum
transcript chunks + question, 2,003 tokens cached, 1 torch thread), interleaved, timed in the
calling thread's CPU time (``time.thread_time``) from the call to the first token (a logits
processor stamps it), so that other processes on a shared machine, which stretch wall times,
count far less. The RAM tier's handle answers once untimed (it fills the tier); every timed
request must serve all 9 nodes from RAM. The rounds alternate the order of the two arms (RAM
tier then ceiling, ceiling then RAM tier), so each arm follows the other and itself equally
often: a request's time depends on the memory state the one before leaves (freed pages the
allocator reuses or gives back). Prints the medians, the paired ratio per round, the wall-clock
medians, and per order the medians and minor page faults.

    python benchmarks/ram_tier_cpu.py --data ../shared/data/qmsum --repeats 15
"""

from __future__ import annotations

import argparse
import copy
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from percache_plugin import enable
from percache_plugin.bench.arm_order import arm_orders, predecessors
from percache_plugin.bench.common import transcript_chunks
from percache_plugin.bench.ttft import SYSTEM, fill
from percache_plugin.bundled import load_smollm2


class Stamp(LogitsProcessor):
    """Records the thread CPU time and the wall time of the first token."""

    def __init__(self) -> None:
        self.cpu: float | None = None
        self.wall: float | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.cpu is None:
            self.cpu, self.wall = time.thread_time(), time.perf_counter()
        return scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="QMSum folder")
    ap.add_argument("--repeats", type=int, default=15, help="interleaved rounds")
    args = ap.parse_args()
    torch.set_num_threads(1)
    chunks, query = transcript_chunks(args.data, 8, 170)
    model, tok = load_smollm2(status=False)
    segments = [SYSTEM, *chunks, query]
    cpu: dict[str, list[float]] = {"ram_tier": [], "ceiling": []}
    wall: dict[str, list[float]] = {"ram_tier": [], "ceiling": []}
    with tempfile.TemporaryDirectory(prefix="percache-ram-cpu-") as store:
        filled = fill(model, tok, store, segments)
        ids, full = filled.ids, filled.full
        ram = enable(model, tok, store=store, ram_cache_bytes=1 << 28)
        ram.generate(segments, max_new_tokens=1)
        faults: dict[str, list[int]] = {"ram_tier": [], "ceiling": []}
        after: dict[str, list[str]] = {"ram_tier": [], "ceiling": []}
        orders = arm_orders(("ram_tier", "ceiling"), args.repeats)
        for order, before in zip(orders, predecessors(orders, start="ram_tier"), strict=True):  # start: the fill
            for arm in order:
                stamp = Stamp()
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                if arm == "ram_tier":
                    c0, w0 = time.thread_time(), time.perf_counter()
                    g = ram.generate(segments, max_new_tokens=1, do_sample=False,
                                     logits_processor=LogitsProcessorList([stamp]))
                    if g.stats.ram_hits != g.stats.nodes_reused or g.stats.nodes_reused != 9:
                        raise SystemExit(f"not every node came from RAM: {g.stats}")
                    del g
                else:
                    cache: Any = copy.deepcopy(full)
                    c0, w0 = time.thread_time(), time.perf_counter()
                    with torch.no_grad():  # the handle's attention, like bench ttft's ceiling
                        model.generate(ids, past_key_values=cache, max_new_tokens=1, do_sample=False,
                                       logits_processor=LogitsProcessorList([stamp]))
                    del cache
                _record(cpu, wall, arm, stamp, c0, w0)
                faults[arm].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
                after[arm].append(before[arm])
        ram.close()
    for arm in cpu:
        print(f"{arm:9s} CPU to first token: median {statistics.median(cpu[arm]) * 1000:.1f} ms "
              f"(min {min(cpu[arm]) * 1000:.1f}); wall median {statistics.median(wall[arm]) * 1000:.1f} ms")
    paired = [r / c for r, c in zip(cpu["ram_tier"], cpu["ceiling"], strict=True)]
    print(f"RAM tier / ceiling, CPU: ratio of medians {statistics.median(cpu['ram_tier']) / statistics.median(cpu['ceiling']):.3f}, "
          f"paired median {statistics.median(paired):.3f} (range {min(paired):.3f}-{max(paired):.3f}); "
          f"wall: ratio of medians {statistics.median(wall['ram_tier']) / statistics.median(wall['ceiling']):.3f}")
    for arm in cpu:
        for before in ("ram_tier", "ceiling"):
            sel = [i for i, p in enumerate(after[arm]) if p == before]
            if sel:
                print(f"{arm:9s} after {before:9s} (n={len(sel)}): CPU median "
                      f"{statistics.median(cpu[arm][i] for i in sel) * 1000:.1f} ms, minor faults median "
                      f"{statistics.median(faults[arm][i] for i in sel):.0f}")


def _record(cpu: dict[str, list[float]], wall: dict[str, list[float]], arm: str, stamp: Stamp,
            c0: float, w0: float) -> None:
    assert stamp.cpu is not None and stamp.wall is not None
    cpu[arm].append(stamp.cpu - c0)
    wall[arm].append(stamp.wall - w0)


if __name__ == "__main__":
    main()
