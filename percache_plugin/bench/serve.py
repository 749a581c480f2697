"""``percache bench serve``: concurrent streaming chat clients against ``percache serve`` on
loopback, and the same load against the same server with no percache (a plain arm): every
response complete, none lost, answers identical across arms, p50/p95 latency and time to first
token, cached prompt tokens."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from ..demo import SAMPLE_CHUNKS
from .common import THREADS_HELP, markdown_table, write_json
from .serve_load import Request, Script, percentile, run_load

__all__ = ["add_arguments", "run", "SCRIPT_QUESTIONS"]

SYSTEM = ("You are a personal assistant. Answer in one short sentence from the user's notes.\n\nNotes:\n"
          + "\n".join(SAMPLE_CHUNKS))
SCRIPT_QUESTIONS = ("When is the choir rehearsal?", "Where is it held?", "Who borrowed the projector?",
                    "When will Ben send the revised numbers?", "How much over plan are travel costs?",
                    "When is the next budget review?", "What should I bring to the rehearsal?")
ARMS = ("plain", "percache")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", type=int, default=8, help="concurrent clients")
    p.add_argument("--duration", type=float, default=40.0,
                   help="seconds each arm sends new requests (requests in flight then finish)")
    p.add_argument("--turns", type=int, default=4, help="user turns per conversation")
    p.add_argument("--max-tokens", type=int, default=12, help="max_tokens of every request")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {ARMS}")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")


def _arm(name: str, model: Any, tok: Any, args: argparse.Namespace, script: Script) -> dict[str, Any]:
    from ..handle import enable
    from ..server.serve import ServerThread
    from ..server.state import ServerSettings
    from .serve_plain import PlainModel

    pc: Any = PlainModel(model, tok) if name == "plain" else enable(model, tok)
    settings = ServerSettings(model_name=script.model, idle_worker=name == "percache",
                              default_max_tokens=args.max_tokens)
    try:
        with ServerThread(pc, settings) as srv:
            reqs, wall = run_load(srv.host, srv.port, script, args.clients, args.duration)
            served = srv.state.runner.finished
            service = [r.run_s for r in srv.state.runner.records]
    finally:
        if name == "percache":
            pc.close()
    summary = _summary(name, reqs, wall, served)
    summary.update(service_p50_s=percentile(service, 50), service_p95_s=percentile(service, 95),
                   service_s=service)
    return summary


def _summary(name: str, reqs: list[Request], wall: float, served: int) -> dict[str, Any]:
    ok = [r for r in reqs if r.complete]
    lat = [r.latency_s for r in ok]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    prompt = sum(r.prompt_tokens for r in ok)
    return {
        "arm": name, "requests": len(reqs), "complete": len(ok), "incomplete": len(reqs) - len(ok),
        "served_by_server": served, "errors": sorted({r.error for r in reqs if r.error})[:5],
        "wall_s": wall, "requests_per_s": len(ok) / wall if wall else 0.0,
        "latency_p50_s": percentile(lat, 50), "latency_p95_s": percentile(lat, 95),
        "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95),
        "prompt_tokens": prompt, "cached_tokens": sum(r.cached_tokens for r in ok),
        "answers": {"/".join(map(str, r.key)): r.text for r in ok},
        "latencies_s": lat, "ttfts_s": ttft,
    }


def _compare(arms: dict[str, dict[str, Any]]) -> dict[str, int]:
    if len(arms) < 2:
        return {}
    a, b = (arms[n]["answers"] for n in ARMS)
    common = sorted(set(a) & set(b))
    return {"common_requests": len(common), "identical_answers": sum(a[k] == b[k] for k in common)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ..bundled import load_smollm2

    torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.arms.split(",") if n.strip()]
    if set(names) - set(ARMS) or not names:
        raise ValueError(f"--arms must name some of {ARMS}, got {args.arms!r}")
    model, tok = load_smollm2(status=True)
    script = Script(SYSTEM, SCRIPT_QUESTIONS, args.turns, args.max_tokens, "smollm2")
    arms = {}
    for name in names:
        print(f"arm {name}: {args.clients} clients for {args.duration:.0f} s ...", flush=True)
        arms[name] = _arm(name, model, tok, args, script)
    rows = [[s["arm"], s["requests"], s["complete"], s["served_by_server"], f"{s['requests_per_s']:.2f}",
             f"{s['service_p50_s']:.2f}",
             f"{s['latency_p50_s']:.2f}", f"{s['latency_p95_s']:.2f}", f"{s['ttft_p50_s']:.2f}",
             f"{s['ttft_p95_s']:.2f}", f"{s['cached_tokens']}/{s['prompt_tokens']}"] for s in arms.values()]
    print(markdown_table(["arm", "sent", "complete", "served", "req/s", "service p50 s", "latency p50 s", "p95 s",
                          "TTFT p50 s", "p95 s", "cached/prompt tokens"], rows))
    compare = _compare(arms)
    if compare:
        print(f"answers identical across arms: {compare['identical_answers']} of "
              f"{compare['common_requests']} requests asked in both")
    result = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                       if k not in ("run", "debug")}, "arms": arms, "compare": compare}
    write_json(args.out, result)
    return result
