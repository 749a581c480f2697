"""Where a verify forward's time goes, against a one-token forward, by operator (torch.profiler).

SmolLM2-135M over ``--cached`` tokens of QMSum text, one thread. Set-ups (interleaved):
``bare`` (percache off, a plain ``DynamicCache``: the model's attention and kernels), ``loop``
(percache on, the linear layers of ``k >= 1`` forwards over the packed weights, as drafted
decoding computes them; ``k = 0`` is plain decoding's forward) and ``idle_mode`` (``k = 0`` inside
a :class:`~torch.overrides.TorchFunctionMode` that routes nothing: the price of the mode itself).
Each forward feeds ``k + 1`` tokens with ``logits_to_keep=k + 1`` and the cache is cropped back.

    python benchmarks/verify_profile.py [--cached 2000] [--ks 0,1,2,4,8] [--repeats 5] [--top 14]

Prints, per set-up and ``k``, the median wall time of the forwards and the profiler's self CPU
time per forward grouped into linears, lm_head, attention, cache, mask and the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from transformers import DynamicCache

import percache_plugin as percache
from percache_plugin.bench.common import DEFAULT_QMSUM
from percache_plugin.bundled import load_smollm2
from percache_plugin.decode import PackedLinears
from percache_plugin.rag.qmsum import iter_meetings, meeting_text


class _Idle(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        return func(*args, **(kwargs or {}))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM)
    p.add_argument("--cached", type=int, default=2000)
    p.add_argument("--ks", default="0,1,2,4,8")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--top", type=int, default=14)
    p.add_argument("--setups", default="bare,loop,idle_mode")
    p.add_argument("--profile", action="store_true", help="also a torch.profiler table per set-up and k")
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tok = load_smollm2()
    pc = percache.enable(model, tok)
    packed = PackedLinears(model)
    ks = [int(k) for k in args.ks.split(",")]
    setups = args.setups.split(",")
    text = meeting_text(next(iter(iter_meetings(args.data))))
    ids = tok(text, add_special_tokens=False)["input_ids"][:args.cached + max(ks) + 1]
    cache = DynamicCache()

    def ctx(setup: str, k: int) -> Any:
        stack = contextlib.ExitStack()
        if setup == "bare":
            stack.enter_context(pc.disabled())
        elif setup == "loop" and k > 0:
            stack.enter_context(packed.active())
        elif setup == "idle_mode":
            stack.enter_context(_Idle())
        return stack

    def forward(k: int) -> None:
        feed = torch.tensor([ids[args.cached:args.cached + k + 1]])
        model(input_ids=feed, past_key_values=cache, use_cache=True, logits_to_keep=k + 1)
        cache.crop(-(k + 1))

    runs = [(s, k) for s in setups for k in ks if not (s == "idle_mode" and k > 0)]
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids[:args.cached]]), past_key_values=cache, use_cache=True)
        for r in range(args.repeats + 2):
            for s, k in (runs if r % 2 == 0 else runs[::-1]):
                with ctx(s, k):
                    t0 = time.perf_counter()
                    forward(k)
                    dt = time.perf_counter() - t0
                if r >= 2:
                    times[s, k].append(dt)
        base = statistics.median(times["bare", 0]) if ("bare", 0) in times else None
        print(f"{args.cached} cached tokens, 1 thread, {args.repeats} repeats: median ms (over bare k=0)")
        for s, k in runs:
            med = statistics.median(times[s, k])
            print(f"  {s:10s} k={k:2d}: {med * 1e3:7.1f} ms" + (f"  ({med / base:.2f})" if base else ""))
        if not args.profile:
            pc.close()
            return
        for s, k in runs:
            with ctx(s, k), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    forward(k)
            print(f"\n== {s} k={k} (self CPU per forward) ==")
            _table(prof, 3, args.top)
    pc.close()


def _table(prof: Any, n: int, top: int) -> None:
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events) / n
    print(f"  total {total / 1e3:.1f} ms")
    for e in events[:top]:
        print(f"  {e.key[:48]:48s} {e.count // n:5d} calls {e.self_cpu_time_total / n / 1e3:7.2f} ms")



if __name__ == "__main__":
    main()
