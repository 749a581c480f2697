"""``percache sizing``: will a model's offloaded loop run without I/O stalls in a RAM budget?"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .sizing import measure_bandwidth, size_loop, weights_bytes

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--weights", type=Path, help="folder of the offloaded weight files (the loop)")
    src.add_argument("--loop-bytes", type=int, help="bytes read per token (the loop), given directly")
    p.add_argument("--ram", type=int, required=True, help="RAM budget for the loop, in bytes")
    p.add_argument("--tolerance-ms", type=float, default=0.0,
                   help="fetch delay a token tolerates (compute the reads overlap with); 0 = synchronous")
    p.add_argument("--bandwidth", type=float, default=None,
                   help="storage bandwidth in bytes/s (default: measured with a short read test)")
    p.add_argument("--probe-dir", type=Path, default=None, help="where the read test writes its file")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    loop = args.loop_bytes if args.loop_bytes is not None else weights_bytes(args.weights)
    bw = args.bandwidth if args.bandwidth is not None else measure_bandwidth(args.probe_dir or args.weights)
    s = size_loop(loop, args.ram, bw, args.tolerance_ms / 1000)
    if args.json:
        print(json.dumps(s.as_dict(), indent=2))
        return 0
    mib = 2**20
    print(f"loop N = {loop / mib:.1f} MiB, cache S = {args.ram / mib:.1f} MiB, "
          f"BW = {bw / mib:.0f} MiB/s{' (measured)' if args.bandwidth is None else ''}, "
          f"T = {args.tolerance_ms:.1f} ms")
    print(f"N <= S + BW x T: {'yes' if s.fits else 'no'} "
          f"(needs S >= {s.cache_needed_bytes / mib:.1f} MiB)")
    print(f"per token, loop pinning (LLM-aware): reads {s.read_per_token_pinned / mib:.1f} MiB, "
          f"stalls {s.stall_per_token_pinned_s * 1000:.1f} ms")
    print(f"per token, LRU:                     reads {s.read_per_token_lru / mib:.1f} MiB, "
          f"stalls {s.stall_per_token_lru_s * 1000:.1f} ms")
    return 0
