"""``percache bench chat``: a LoCoMo conversation on SmolLM2, per turn TTFT, prompt tokens
computed and resident K/V bytes, for re-prefill, a carried DynamicCache, a sliding window, and
percache at the same budget in each eviction mode and restarted mid-conversation."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..bundled import load_smollm2
from ..handle import enable
from .chat_methods import TurnRow, percache_conversation, plain_conversation
from .common import THREADS_HELP, markdown_table, write_json

__all__ = ["add_arguments", "run", "locomo_messages"]

DEFAULT_LOCOMO = Path("../shared/data/locomo/locomo_dev5.json")
SYSTEM = "You are a friendly assistant. Reply in one or two short sentences."
METHODS = ("reprefill", "carried", "window", "exact", "shifted", "masked", "restart")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_LOCOMO, help="LoCoMo JSON (locomo_dev5.json)")
    p.add_argument("--sample", type=int, default=0, help="which conversation of the file")
    p.add_argument("--turns", type=int, default=60, help="user turns (dialogue turns of the conversation)")
    p.add_argument("--budget", type=int, default=1024, help="session_kv_tokens (and the sliding window)")
    p.add_argument("--max-new", type=int, default=32, help="reply tokens at most")
    p.add_argument("--words", type=int, default=40, help="user messages are cut to this many words")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {METHODS}")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--out", type=Path, default=Path("docs/chat"), help="plots and results.json go here")


def locomo_messages(path: Path, sample: int, n: int, words: int) -> list[str]:
    """User messages: the dialogue turns of one LoCoMo conversation, in order."""
    if not path.is_file():
        raise FileNotFoundError(f"LoCoMo data not found at {str(path)!r}; pass --data PATH")
    conv = json.loads(path.read_text())[sample]["conversation"]
    out: list[str] = []
    k = 1
    while f"session_{k}" in conv and len(out) < n:
        for turn in conv[f"session_{k}"]:
            out.append(" ".join(str(turn["text"]).split()[:words]))
        k += 1
    if len(out) < n:
        raise ValueError(f"conversation {sample} has only {len(out)} dialogue turns, asked for {n}")
    return out[:n]


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {METHODS}")
    messages = locomo_messages(args.data, args.sample, args.turns, args.words)
    model, tok = load_smollm2()
    results: dict[str, list[TurnRow]] = {}
    with tempfile.TemporaryDirectory(prefix="percache-bench-chat-") as tmp:
        base = enable(model, tok)
        for m in methods:
            print(f"bench chat: {m} ({len(messages)} turns)", flush=True)
            if m in ("reprefill", "carried", "window"):
                results[m] = plain_conversation(base, messages, m, args.budget, args.max_new, SYSTEM)
                continue
            base.close()
            mode = "exact" if m == "restart" else m
            store = Path(tmp) / m if m == "restart" else None

            def make(mode: str = mode, store: Path | None = store) -> Any:
                return enable(model, tok, store=store, session_kv_tokens=args.budget, session_eviction=mode)

            results[m] = percache_conversation(
                make, messages, args.max_new, SYSTEM,
                restart_at=len(messages) // 2 + 1 if m == "restart" else None,
                quality=m in ("shifted", "masked"))
            base = enable(model, tok)
        base.close()
    summary = _summary(results, args)
    payload = {"args": {k: str(v) for k, v in vars(args).items() if k != "run"}, "summary": summary,
               "turns": {m: [r.as_dict() for r in rows] for m, rows in results.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "results.json", payload)
    from .chat_plots import per_turn

    per_turn(results, "ttft_s", "time to first token (s)", args.out / "chat_ttft.png", log=True)
    per_turn(results, "kv_bytes", "resident K/V (MiB)", args.out / "chat_kv.png", scale=2**-20)
    print(markdown_table(["method", "last TTFT s", "last computed", "max K/V MiB", "evictions",
                          "mean KL", "top-1"], summary["table"]))
    for line in summary["targets"]:
        print(line)
    return payload


def _summary(results: dict[str, list[TurnRow]], args: argparse.Namespace) -> dict[str, Any]:
    table = []
    for m, rows in results.items():
        q = [r for r in rows if r.kl is not None]
        table.append([m, f"{rows[-1].ttft_s:.3f}", rows[-1].computed, f"{max(r.kv_bytes for r in rows) / 2**20:.1f}",
                      sum(r.evicted for r in rows),
                      f"{sum(r.kl for r in q if r.kl is not None) / len(q):.4f}" if q else "-",
                      f"{sum(bool(r.top1) for r in q) / len(q):.2f}" if q else "-"])
    targets = []
    last = {m: rows[-1].ttft_s for m, rows in results.items()}
    if "exact" in last and "reprefill" in last:
        targets.append(f"last-turn TTFT reprefill/exact = {last['reprefill'] / last['exact']:.1f}x (target >= 10x)")
    if "exact" in last and "carried" in last:
        targets.append(f"last-turn TTFT exact/carried = {last['exact'] / last['carried']:.2f}x (target <= 1.25x)")
    if "exact" in results:
        per_token = _bytes_per_token(results["exact"])
        worst = max(r.kv_bytes for r in results["exact"])
        turn_max = max(r.prompt_tokens for r in results["exact"]) if per_token else 0
        targets.append(f"exact: max resident K/V {worst / 2**20:.1f} MiB; budget {args.budget} tokens = "
                       f"{args.budget * per_token / 2**20:.1f} MiB (+ head and one turn); largest prompt {turn_max}")
    if "restart" in results and "exact" in results:
        k = len(results["restart"]) // 2
        r, e = results["restart"][k].ttft_s, results["exact"][k].ttft_s
        targets.append(f"first turn after restart (turn {k + 1}): {r:.3f}s vs {e:.3f}s without = {r / e:.2f}x (target <= 2x)")
    return {"table": table, "targets": targets}


def _bytes_per_token(rows: Sequence[TurnRow]) -> float:
    for r in rows:
        if r.kv_bytes and r.prompt_tokens:
            return r.kv_bytes / max(1, r.prompt_tokens + r.computed - r.computed)
    return 0.0
