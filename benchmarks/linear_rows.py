"""What a linear layer costs for M input rows against one row, on SmolLM2-135M's weight shapes,
with torch's kernel (``F.linear``: MKL sgemm for float32) and with oneDNN over a weight packed
once (``decode/packed.py``): why a forward verifying draft tokens cost ~2x a one-token forward.

Each shape is timed over 30 random matrices, row counts and kernels interleaved, medians (as many as the model's layers, so that the weights
come from memory as in a forward, not from the cache), the lm_head (49152x576) over one.

    python benchmarks/linear_rows.py [--rows 1,2,3,4,5,8,9,17] [--repeats 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

SHAPES = {"q/o_proj 576x576": (576, 576), "gate/up_proj 1536x576": (1536, 576),
          "down_proj 576x1536": (576, 1536), "lm_head 49152x576": (49152, 576)}


def _pass(fn: Callable[[torch.Tensor, int], torch.Tensor], n: int, x: torch.Tensor) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(x, i)
    return (time.perf_counter() - t0) / n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="1,2,3,4,5,8,9,17")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = [int(m) for m in args.rows.split(",")]
    g = torch.Generator().manual_seed(0)
    print(f"{args.threads} thread(s); microseconds for one row, then the time of M rows over one row's")
    print("| weight | kernel | 1 row (us) | " + " | ".join(f"M={m}" for m in rows[1:]) + " |")
    print("|---|---|---|" + "---|" * (len(rows) - 1))
    with torch.inference_mode():
        for name, (n_out, n_in) in SHAPES.items():
            n = 1 if n_out > 10000 else 30
            ws = [torch.randn(n_out, n_in, generator=g) for _ in range(n)]
            packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w in ws]
            kernels: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
                "F.linear (MKL)": lambda x, i, ws=ws: F.linear(x, ws[i]),
                "oneDNN, packed": lambda x, i, pk=packed: torch.ops.mkldnn._linear_pointwise(x, pk[i], None, "none", [], ""),
            }
            xs = {m: torch.randn(m, n_in, generator=g) for m in rows}
            times: dict[tuple[str, int], list[float]] = {(k, m): [] for k in kernels for m in rows}
            for r in range(args.repeats + 1):  # interleaved; the first round warms up
                for kernel, fn in kernels.items():
                    for m in (rows if r % 2 == 0 else rows[::-1]):
                        t = _pass(fn, n, xs[m])
                        if r:
                            times[kernel, m].append(t)
            for kernel in kernels:
                t = [statistics.median(times[kernel, m]) for m in rows]
                print(f"| {name} | {kernel} | {t[0] * 1e6:.0f} | " + " | ".join(f"{v / t[0]:.2f}" for v in t[1:]) + " |")

if __name__ == "__main__":
    main()
