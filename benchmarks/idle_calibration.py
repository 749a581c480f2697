"""What the idle task ``calibrate`` costs a foreground request (SmolLM2-135M, fresh store).

A handle with the defaults queues the task at ``enable()``. First ``--requests`` foreground
``generate`` calls with no background work (the baseline), then the idle worker is started and
the same calls are made ``--gap`` seconds apart while it measures the curve: each one preempts
the measuring (stopped within one forward, queued again, its timed forwards kept). Reported per
phase: the median and highest request time and time to first token. Finally the worker is left
alone until the curve is stored, and how long that took. With ``--steady N`` the requests go on
every ``--gap`` seconds (at most N of them) until the curve is stored, and never leave it alone:
steady traffic with idle gaps shorter than the whole measuring.

    python benchmarks/idle_calibration.py [--requests 5] [--gap 4] [--threads 1] [--steady 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

import torch

import percache_plugin as percache
from percache_plugin.bundled import load_smollm2

SEGMENTS = ["You are a helpful assistant.",
            "Mail from Ana: the choir rehearsal moved to Friday at 6 pm, in the small hall. "
            "Ben will bring the new scores; Carl cannot come and sends his apologies.",
            "When is the rehearsal, and who brings the scores?"]


def _request(pc: Any, new_tokens: int) -> dict[str, float]:
    t0 = time.perf_counter()
    g = pc.generate(SEGMENTS, max_new_tokens=new_tokens, do_sample=False)
    return {"s": time.perf_counter() - t0, "ttft": g.stats.ttft_s}


def _summary(runs: list[dict[str, float]]) -> dict[str, float]:
    return {"median_s": statistics.median(r["s"] for r in runs), "max_s": max(r["s"] for r in runs),
            "median_ttft_s": statistics.median(r["ttft"] for r in runs),
            "max_ttft_s": max(r["ttft"] for r in runs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=5)
    p.add_argument("--gap", type=float, default=4.0, help="seconds between requests while calibrating")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steady", type=int, default=0,
                   help="go on with requests every --gap s until the curve is stored (at most this many)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    with tempfile.TemporaryDirectory() as tmp, percache.enable(model, tok, store=tmp) as pc:
        assert [t.kind for t in pc.idle_queue.pending()] == ["calibrate"]
        _request(pc, args.new_tokens)  # warm-up: packing, first forwards
        quiet = [_request(pc, args.new_tokens) for _ in range(args.requests)]
        pc.start_idle_worker(poll_s=0.05)
        busy = []
        for _ in range(args.requests):
            time.sleep(args.gap)
            busy.append(_request(pc, args.new_tokens))
        steady, t_steady = 0, time.perf_counter()
        while steady < args.steady and pc.stats().draft_cost_curve == "built-in":
            time.sleep(args.gap)
            _request(pc, args.new_tokens)
            steady += 1
        steady_s = time.perf_counter() - t_steady
        t0 = time.perf_counter()
        while pc.stats().draft_cost_curve == "built-in" and time.perf_counter() - t0 < 300:
            time.sleep(0.5)
        alone_s = time.perf_counter() - t0
        report = pc.stop_idle_worker()
        out = {"quiet": _summary(quiet), "while_calibrating": _summary(busy),
               "calibration_alone_s": round(alone_s, 1), "curve": pc.stats().draft_cost_curve,
               "preempted": report.preempted if report else None,
               "steady_requests": steady, "steady_s": round(steady_s, 1),
               "calibration": {k: v for k, v in vars(pc.stats()).items() if k.startswith("calibration_")},
               "ratios": list(pc.engine.drafts.curve(pc.fingerprint, pc.config)[0].ratios)}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
