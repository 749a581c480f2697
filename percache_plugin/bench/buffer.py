"""``percache bench buffer``: trace-driven simulation of the buffer-cache policies.

Three traces, recorded through :class:`~percache_plugin.buffer.trace.Tracer`: (i) a synthetic
replay of the K/V store's access pattern under QMSum-like questions, (ii) chat sessions (a
repeated persona prefix and a growing session), (iii) real weight reads of a random-weight Llama
whose decoder layers are offloaded to disk (accelerate), over a few generated tokens. For each,
the hit ratio of LRU, LFU, LeCaR and the LLM-aware policy at cache sizes from 5% to 100% of the
trace's distinct blocks; one plot per trace. ``--kv-trace`` adds recorded K/V traces (e.g. from
``benchmarks/kv_trace_replay.py``, real QMSum questions and retrieval, or from
``benchmarks/e2e_kv_trace.py``; those of docs/BENCHMARKS.md are in ``benchmarks/data/traces/``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..buffer.cache import simulate
from ..buffer.trace import Access, Tracer, blocks, read_trace, write_trace
from ..buffer.workloads import chat_trace, qmsum_like_trace
from .common import markdown_table, write_json

__all__ = ["add_arguments", "run", "POLICIES", "OTHERS", "offload_trace", "recorded_trace", "sweep"]

POLICIES = ("lru", "lfu", "lecar", "llm-static", "llm")
OTHERS = ("lru", "lfu", "lecar")
"""The policies the LLM-aware one is compared with (``llm-static`` is its own classification
alone, shown for reference)."""
SHARES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--block-kib", type=int, default=1024, help="block size of the simulation")
    p.add_argument("--out", type=Path, default=Path("bench-buffer"), help="folder for traces and plots")
    p.add_argument("--tokens", type=int, default=6, help="tokens generated in the offload trace")
    p.add_argument("--kv-trace", type=Path, nargs="+", default=None,
                   help="also simulate these recorded K/V traces (CSV, docs/TRACES.md; each named "
                        "by its file's stem), e.g. one written by benchmarks/kv_trace_replay.py "
                        "from real QMSum questions or by benchmarks/e2e_kv_trace.py")
    p.add_argument("--json", type=Path, default=None, help="write the results here")


def offload_trace(tokens: int, hidden: int = 512, layers: int = 8) -> list[Access]:
    """Weight reads of ``tokens`` decoding steps (plus the prefill) of an offloaded Llama, with
    no cache (every read goes to the files)."""
    from .offload_model import load_offloaded, write_offloaded

    tracer = Tracer()
    with tempfile.TemporaryDirectory(prefix="percache-offload-") as d:
        write_offloaded(Path(d), hidden, layers)
        model, _ = load_offloaded(Path(d), hidden, layers, 0, "lru", tracer)
        ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
        with torch.no_grad():
            model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    return tracer.accesses


def recorded_trace(path: Path) -> list[Access]:
    """A recorded trace (``--kv-trace``); UsageError names a missing file."""
    from ..cli_errors import UsageError

    if not path.is_file():
        raise UsageError(f"--kv-trace {path}: no such file")
    return read_trace(path)


def sweep(accesses: list[Access], block: int) -> dict[str, Any]:
    bl = list(blocks(accesses, block))
    distinct = len({k for k, _, _ in bl})
    rows = []
    for share in SHARES:
        cap = max(1, round(distinct * share)) * block
        rows.append({"share": share, "blocks": cap // block,
                     **{p: simulate(bl, p, cap).hit_ratio for p in POLICIES}})
    return {"reads": len(bl), "distinct_blocks": distinct, "rows": rows}


def plot(name: str, result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    shares = [r["share"] * 100 for r in result["rows"]]
    labels = {"llm": "LLM-aware", "llm-static": "LLM-aware, no fallback"}
    for p, style in zip(POLICIES, ("o-", "s-", "^-", "x:", "D-"), strict=True):
        ax.plot(shares, [r[p] * 100 for r in result["rows"]], style, label=labels.get(p, p.upper()), ms=4)
    ax.set_xlabel("cache size (% of distinct blocks)")
    ax.set_ylabel("hit ratio (%)")
    ax.set_title(name)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ..cli_errors import UsageError

    for name in ("block_kib", "tokens"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    torch.set_num_threads(1)
    block = args.block_kib * 1024
    args.out.mkdir(parents=True, exist_ok=True)
    traces: dict[str, list[Access]] = {}
    for name, fn in (("kv-qmsum", qmsum_like_trace), ("kv-chat", chat_trace)):
        t = Tracer()
        fn(t)
        traces[name] = t.accesses
    for path in args.kv_trace or ():
        traces[path.stem] = recorded_trace(path)
    traces["offload"] = offload_trace(args.tokens)
    result: dict[str, Any] = {"block_bytes": block}
    for name, accesses in traces.items():
        write_trace(args.out / f"{name}.csv", accesses)
        res = sweep(accesses, block)
        result[name] = res
        plot(name, res, args.out / f"{name}.png")
        best_gap = min(r["llm"] - max(r[p] for p in OTHERS) for r in res["rows"])
        over_lru = max(r["llm"] - r["lru"] for r in res["rows"])
        res["llm_minus_best_other_min"] = best_gap
        res["llm_minus_lru_max"] = over_lru
        print(f"\n{name}: {res['reads']} block reads, {res['distinct_blocks']} distinct blocks; "
              f"LLM-aware minus best other (worst size): {best_gap * 100:+.1f} pts; "
              f"over LRU (best size): {over_lru * 100:+.1f} pts")
        print(markdown_table(["cache", *POLICIES],
                             [[f"{r['share'] * 100:.0f}%", *(f"{r[p] * 100:.1f}" for p in POLICIES)]
                              for r in res["rows"]]))
    write_json(args.json, result)
    return result
