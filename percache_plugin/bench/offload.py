"""``percache bench offload``: decoding a model whose decoder layers are offloaded to disk
(accelerate), with percache's buffer cache at 25/50/75% of the offloaded bytes, LRU vs LLM-aware,
against the sizing model's prediction from the measured bandwidth."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ..buffer.offload import read_path_bandwidth
from ..buffer.sizing import measure_bandwidth, size_loop
from ..cache_arg import cache_kw
from .common import markdown_table, write_json

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hidden", type=int, default=1024, help="hidden size of the random Llama")
    p.add_argument("--layers", type=int, default=12, help="decoder layers (all offloaded)")
    p.add_argument("--tokens", type=int, default=4, help="timed decoding steps per arm")
    p.add_argument("--budgets", default="0.25,0.5,0.75", help="cache budgets, shares of the offloaded bytes")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="weight dtype of the random model (bfloat16 halves its bytes)")
    p.add_argument("--dir", type=Path, default=None,
                   help="offload folder, kept afterwards and reused when it holds the same model "
                        "(default: a temporary one)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")


MISS_PATH_SAMPLE = 512 * 2**20


def _sample(paths: list[Path], limit: int) -> list[Path]:
    """The first of ``paths`` up to ``limit`` bytes (at least one): a few whole layers, whose
    reads cost what the run's do, without holding the whole model's worth of freed buffers."""
    out: list[Path] = []
    total = 0
    for path in paths:
        if out and total >= limit:
            break
        out.append(path)
        total += path.stat().st_size
    return out


def _decode(model: Any, weights: Any, steps: int) -> tuple[float, int]:
    """Prefill and two warm-up steps (the policy classifies the loop), then ``steps`` timed
    steps; returns (seconds per token, bytes read per token) over the timed steps."""
    from transformers import DynamicCache

    cache = DynamicCache()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        out = model(ids, **cache_kw(cache), use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        for _ in range(2):
            nxt = model(nxt, **cache_kw(cache), use_cache=True).logits[:, -1:].argmax(-1)
        read0, t0 = weights.bytes_read, time.perf_counter()
        for _ in range(steps):
            nxt = model(nxt, **cache_kw(cache), use_cache=True).logits[:, -1:].argmax(-1)
        elapsed = time.perf_counter() - t0
    return elapsed / steps, (weights.bytes_read - read0) // steps


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ..cli_errors import UsageError
    from .offload_model import load_offloaded, write_offloaded

    for name in ("hidden", "layers", "tokens"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1, got {getattr(args, name)}")

    torch.set_num_threads(1)
    budgets = [float(b) for b in args.budgets.split(",")]
    with tempfile.TemporaryDirectory(prefix="percache-offload-") as tmp:
        folder = args.dir or Path(tmp)
        n_params, offloaded = write_offloaded(folder, args.hidden, args.layers, args.dtype)
        bw = measure_bandwidth(folder)
        # The same prediction from the bandwidth of the path a miss takes (one file per
        # tensor, each into a fresh buffer; 512 MiB of them): what one long sequential read
        # leaves out.
        bw_files = read_path_bandwidth(_sample(sorted(Path(folder).glob("*.dat")), MISS_PATH_SAMPLE))
        rows: list[dict[str, Any]] = []
        arms = [(1.0, "llm"), *((b, p) for b in budgets for p in ("lru", "llm"))]
        for share, policy in arms:
            model, weights = load_offloaded(folder, args.hidden, args.layers, int(offloaded * share), policy)
            s_tok, b_tok = _decode(model, weights, args.tokens)
            del model
            rows.append({"budget_share": share, "policy": policy, "s_per_token": s_tok,
                         "tokens_per_s": 1 / s_tok, "bytes_read_per_token": b_tok})
        compute = rows[0]["s_per_token"]  # everything resident: no reads, compute only
        for r in rows:
            lru = r["policy"] == "lru"
            for suffix, b in (("", bw), ("_files", bw_files)):
                pred = size_loop(offloaded, int(offloaded * r["budget_share"]), b)
                stall = pred.stall_per_token_lru_s if lru else pred.stall_per_token_pinned_s
                r[f"predicted_stall{suffix}_s"] = stall
                r[f"predicted_tokens_per_s{suffix}"] = 1 / (compute + stall)
            r["predicted_bytes_per_token"] = pred.read_per_token_lru if lru else pred.read_per_token_pinned
    result = {"parameters": n_params, "offloaded_bytes": offloaded, "bandwidth_bytes_per_s": bw,
              "read_path_bandwidth_bytes_per_s": bw_files,
              "dtype": args.dtype, "hidden": args.hidden, "layers": args.layers, "timed_tokens": args.tokens, "rows": rows}
    mib = 2**20
    print(f"random Llama, {n_params / 1e6:.0f}M parameters ({args.dtype}), {offloaded / mib:.0f} MiB offloaded; "
          f"measured read bandwidth {bw / mib:.0f} MiB/s (one file, page cache dropped), "
          f"{bw_files / mib:.0f} MiB/s through the miss path (every tensor file, as a miss reads it)")
    print(markdown_table(
        ["budget", "policy", "tokens/s", "predicted tokens/s", "predicted, miss-path BW", "MiB read/token",
         "predicted MiB/token"],
        [[f"{r['budget_share'] * 100:.0f}%", r["policy"], f"{r['tokens_per_s']:.2f}",
          f"{r['predicted_tokens_per_s']:.2f}", f"{r['predicted_tokens_per_s_files']:.2f}",
          f"{r['bytes_read_per_token'] / mib:.0f}",
          f"{r['predicted_bytes_per_token'] / mib:.0f}"] for r in rows]))
    write_json(args.json, result)
    return result
