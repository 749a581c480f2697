"""Record a K/V-store trace during a short end-to-end replay of percache (``bench e2e``'s
replay: documents, idle phases with prediction and population, questions), with
``Config.kv_trace`` on. Feed the file to ``percache bench buffer --kv-trace``.

    python benchmarks/e2e_kv_trace.py --data ../shared/data/qmsum --users 2 --queries 4 --out kv-e2e.csv

Every user's handle appends to the same trace (each user has their own store, so node files
do not collide: a key is a hash of the chunk's tokens and its prefix). The trace counts do not
depend on timing except through the idle phases, whose budget ``--idle-budget`` fixes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from percache_plugin.bench.common import DEFAULT_QMSUM
from percache_plugin.bench.e2e import E2ESettings, run_benchmark
from percache_plugin.buffer.trace import read_trace
from percache_plugin.bundled import load_smollm2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM)
    p.add_argument("--users", type=int, default=2)
    p.add_argument("--queries", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--idle-budget", type=float, default=None, help="seconds per idle phase")
    p.add_argument("--streams", nargs="+", default=["original"],
                   help="query streams replayed (each stream replays the users again on fresh "
                        "stores, whose nodes have the same keys: more than one conflates them)")
    p.add_argument("--out", type=Path, default=Path("kv-e2e.csv"))
    args = p.parse_args()
    torch.set_num_threads(1)
    args.out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="percache-e2e-trace-") as tmp:
        settings = E2ESettings(data=args.data, users=args.users, queries=args.queries,
                               methods=("percache",), max_new_tokens=args.max_new_tokens,
                               streams=tuple(args.streams),
                               tau_sweep=(), idle_budget_s=args.idle_budget,
                               config={"kv_trace": str(args.out.resolve())}, out=Path(tmp),
                               progress=False)
        run_benchmark(settings, load_model=lambda: load_smollm2(status=True))
    rows = read_trace(args.out)
    reads = sum(a.op == "r" for a in rows)
    print(f"{reads} node reads, {len(rows) - reads} node writes, "
          f"{len({a.file for a in rows})} nodes -> {args.out}")


if __name__ == "__main__":
    main()
