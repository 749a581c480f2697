"""``percache bench idle``: the cost of idle-time work to the foreground, the scheduler's
compute/latency trade, and how well an idle budget holds (SmolLM2, real QMSum meetings).

1. Preemption: time to first token of a foreground request with the idle worker quiet vs
   while it is decoding a predicted answer; the added latency should stay within one decode
   step plus 50 ms.
2. Scheduler: the same predicted questions (QMSum queries) populated prefill-only vs decoded,
   then the users' paraphrases asked: background FLOPs and tokens, QA-bank hits and
   foreground latency of each policy, side by side.
3. Budget: how far ``idle(budget_s=X)`` runs past X, background prefill in chunks vs in
   one forward (:mod:`percache_plugin.bench.idle_budget`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ..bundled import load_smollm2
from ..config import Config
from ..handle import PerCache, enable
from ..hooks.specs import hookimpl
from ..rag.qmsum import iter_meetings, meeting_text
from .common import (
    DEFAULT_QMSUM,
    NO_CALIBRATION,
    THREADS_HELP,
    markdown_table,
    median,
    require_qmsum,
    write_json,
)
from .idle_budget import budget_overrun, budget_table

__all__ = ["add_arguments", "run"]

PAIRS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "qa_paraphrases.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM, help="QMSum folder")
    p.add_argument("--pairs", type=Path, default=PAIRS, help="paraphrase pairs (JSON)")
    p.add_argument("--repeats", type=int, default=5, help="foreground requests per side")
    p.add_argument("--questions", type=int, default=6, help="predicted questions per policy")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                   help="which parts to run (default: all)")
    p.add_argument("--budgets", type=_floats, default=BUDGETS,
                   help="idle budgets of the budget part, seconds, comma-separated "
                        f"(default {','.join(map(str, BUDGETS))})")
    p.add_argument("--json", type=Path, default=None)


PARTS = ("preemption", "policy", "budget")
BUDGETS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
BUDGET_TEXT_CHARS = 15_000
"""The budget part adds this much of the meeting (about 25 chunks: more idle work than any budget)."""


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated seconds, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"want positive seconds, got {text!r}")
    return values


class _DecodeWatch:
    """Signals when the idle worker is decoding (a one-token query on the worker thread)."""

    def __init__(self) -> None:
        self.decoding = threading.Event()

    @hookimpl(wrapper=True)
    def percache_attention(self, ctx: Any, module: Any, query: torch.Tensor, key: Any, value: Any,
                           attention_mask: Any, kwargs: Any) -> Any:
        if query.shape[2] == 1 and threading.current_thread().name == "percache-idle":
            self.decoding.set()
        return (yield)


def _meeting(args: argparse.Namespace) -> tuple[str, str, list[tuple[str, str]]]:
    pairs = json.loads(args.pairs.read_text())["pairs"]
    meeting_id = pairs[0]["meeting"]
    mine = [(p["query"], p["paraphrase"]) for p in pairs if p["meeting"] == meeting_id]
    for m in iter_meetings(args.data / "ALL"):
        if m.id == meeting_id:
            return m.id, meeting_text(m), mine[: args.questions]
    raise FileNotFoundError(f"meeting {meeting_id} of {args.pairs} is not under {args.data}")


def _preemption(pc: PerCache, text: str, args: argparse.Namespace) -> dict[str, Any]:
    watch = _DecodeWatch()
    pc.plugins.register(watch)
    request = ["You are a helpful assistant.", text[:1500], "What was decided?"]
    pc.generate(request, max_new_tokens=1)  # its K/V is now cached: both sides measure the same work
    quiet = [pc.generate(request, max_new_tokens=1).stats.ttft_s for _ in range(args.repeats)]
    pc.configure(background_max_new_tokens=400, similarity_threshold=0.8, population_cutoff=0.9)
    pc.start_idle_worker(poll_s=0.01)
    busy = []
    for i in tqdm(range(args.repeats), desc="preemption"):
        watch.decoding.clear()
        pc.idle_queue.push("populate", f"What did the team say about item {i}?", "bench")
        if not watch.decoding.wait(120):
            raise RuntimeError("the idle worker never started decoding")
        time.sleep(0.3)  # well into the decode
        busy.append(pc.generate(request, max_new_tokens=1).stats.ttft_s)
    report = pc.stop_idle_worker()
    pc.plugins.unregister(watch)
    # One decode step of the background task's kind, measured alone.
    g = pc.generate(request, max_new_tokens=17, do_sample=False)
    step = (g.stats.total_s - g.stats.ttft_s) / max(1, g.stats.new_tokens - 1)
    added = median(busy) - median(quiet)
    return {"ttft_quiet_median_s": median(quiet), "ttft_busy_median_s": median(busy),
            "added_s": added, "decode_step_s": step, "bound_s": step + 0.05,
            "within_bound": added <= step + 0.05, "preempted": report.preempted if report else 0,
            "quiet_s": quiet, "busy_s": busy}


def _policy(model: Any, tok: Any, text: str, pairs: list[tuple[str, str]], cutoff: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="percache-bench-idle-") as store:
        pc = enable(model, tok, store=store, predict="off", population_cutoff=cutoff,
                    background_max_new_tokens=48, **NO_CALIBRATION)
        pc.add_documents(text, scope="m")
        for q, _ in pairs:
            pc.idle_queue.push("populate", q, "m")
        idle = pc.idle()
        hits, latency = 0, []
        for _, para in pairs:
            a = pc.ask(para, scope="m", max_new_tokens=48)
            hits += a.source == "qa_bank"
            latency.append(a.latency_s)
        pc.disable()
    return {"population_cutoff": cutoff, "background_flops": idle.flops,
            "background_prefill_tokens": idle.prefill_tokens, "background_decode_tokens": idle.decode_tokens,
            "qa_hits": hits, "questions": len(pairs), "mean_latency_s": sum(latency) / len(latency)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_qmsum(args.data)
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2(status=True)
    meeting, text, pairs = _meeting(args)
    parts = set(getattr(args, "parts", PARTS))
    result: dict[str, Any] = {"meeting": meeting}
    if "preemption" in parts:
        with tempfile.TemporaryDirectory(prefix="percache-bench-idle-") as store:
            pc = enable(model, tok, store=store, predict="off", embedder="hash", **NO_CALIBRATION)
            pre = result["preemption"] = _preemption(pc, text, args)
            pc.disable()
        print(markdown_table(
            ["TTFT worker quiet", "TTFT worker decoding", "added", "one decode step", "bound (step + 50 ms)"],
            [[f"{pre['ttft_quiet_median_s'] * 1000:.0f} ms", f"{pre['ttft_busy_median_s'] * 1000:.0f} ms",
              f"{pre['added_s'] * 1000:.0f} ms", f"{pre['decode_step_s'] * 1000:.0f} ms",
              f"{pre['bound_s'] * 1000:.0f} ms"]]))
        print()
    if "policy" in parts:
        tau = result["tau"] = Config().similarity_threshold
        policies = result["policies"] = [_policy(model, tok, text, pairs, cutoff) for cutoff in (1.0, 0.0)]
        full, prefill = policies
        saving = 1 - prefill["background_flops"] / full["background_flops"] if full["background_flops"] else 0.0
        result["prefill_only_saving"] = saving
        print(markdown_table(
            ["policy", "background FLOPs", "prefill tokens", "decode tokens", "QA hits", "mean latency"],
            [[("decode (tau <= cutoff)" if p is full else "prefill only (tau > cutoff)"),
              f"{p['background_flops']:.3g}", p["background_prefill_tokens"], p["background_decode_tokens"],
              f"{p['qa_hits']}/{p['questions']}", f"{p['mean_latency_s']:.2f} s"] for p in policies]))
        print(f"\nprefill-only saves {saving:.0%} of background compute at tau={tau} (meeting {meeting})\n")
    if "budget" in parts:
        budgets = tuple(getattr(args, "budgets", BUDGETS))
        with tqdm(total=2 * len(budgets), desc="idle budget runs") as bar:
            result["budget"] = budget_overrun(model, tok, text[:BUDGET_TEXT_CHARS], budgets, bar)
        print(budget_table(result["budget"]))
    write_json(args.json, result)
    return result
