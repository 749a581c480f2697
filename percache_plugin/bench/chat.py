"""``percache bench chat``: a LoCoMo conversation on SmolLM2, per turn TTFT, prompt tokens
computed and resident K/V bytes, for (a) re-prefill, (b) a carried DynamicCache, (c) a sliding
window, (d) percache at the same budget in each eviction mode and (e) percache restarted
mid-conversation.

One model load; every method steps one turn at a time in the same loop (turn ``t`` of every
method is measured within seconds of the others'). Methods that run ``pc.chat`` get their own
module tree over the same weight tensors (a shallow model copy), so no handle's attention
hook sees another's forwards. (a) and (c) are full prefills measured at sampled turns
(``--every``) on the reference conversation of (b); their resident K/V is counted at every turn.
(e): before turn ``turns // 2 + 1`` the exact arm's store is copied; after the exact arm's turn,
a new handle opens the copy and runs the same turn (the first after a restart).
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..bundled import load_smollm2
from ..handle import enable
from ..session.layout import ChatLayout
from .chat_methods import CarriedArm, PercacheArm, TurnRow, prefill_row, window_ids
from .chat_summary import summary
from .common import DEFAULT_LOCOMO, THREADS_HELP, markdown_table, write_json

__all__ = ["add_arguments", "run", "locomo_messages", "sampled_turns", "shared_copy"]

SYSTEM = "You are a friendly assistant. Reply in one or two short sentences."
METHODS = ("reprefill", "carried", "window", "exact", "shifted", "masked", "restart")
MODES = ("exact", "shifted", "masked")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_LOCOMO, help="LoCoMo JSON (locomo_dev5.json)")
    p.add_argument("--sample", type=int, default=0, help="which conversation of the file")
    p.add_argument("--turns", type=int, default=60, help="user turns (dialogue turns of the conversation)")
    p.add_argument("--budget", type=int, default=1024, help="session_kv_tokens (and the sliding window)")
    p.add_argument("--max-new", type=int, default=32, help="reply tokens at most")
    p.add_argument("--words", type=int, default=40, help="user messages are cut to this many words")
    p.add_argument("--every", type=int, default=10,
                   help="re-prefill, sliding window and KL are measured at turn 1, every N-th turn and the last")
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


def sampled_turns(n: int, every: int) -> set[int]:
    """Turn 1, every ``every``-th turn and the last."""
    return {1, n} | set(range(every, n + 1, every)) if every > 0 else set(range(1, n + 1))


def shared_copy(model: Any) -> Any:
    """A new module tree over the same parameter and buffer tensors (no weight copy)."""
    memo = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return copy.deepcopy(model, memo)


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {METHODS}")
    messages = locomo_messages(args.data, args.sample, args.turns, args.words)
    model, tok = load_smollm2(status=True)
    with tempfile.TemporaryDirectory(prefix="percache-bench-chat-") as tmp:
        results = conversation(model, tok, messages, methods, args, Path(tmp))
    report = summary(results, args.budget, args.turns // 2 + 1)
    payload = {"args": {k: str(v) for k, v in vars(args).items() if k != "run"}, "summary": report,
               "turns": {m: [r.as_dict() for r in rows] for m, rows in results.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "results.json", payload)
    from .chat_plots import per_turn

    plotted = {m: rows for m, rows in results.items() if m != "restart"}
    per_turn(plotted, "ttft_s", "time to first token (s)", args.out / "chat_ttft.png", log=True)
    per_turn(plotted, "kv_bytes", "resident K/V (MiB)", args.out / "chat_kv.png", scale=2**-20)
    print(markdown_table(["method", "last TTFT s", "last computed", "max K/V MiB", "evictions",
                          "mean KL", "top-1"], report["table"]))
    for line in report["targets"]:
        print(line)
    return payload


def conversation(model: Any, tok: Any, messages: list[str], methods: list[str], args: argparse.Namespace,
                 tmp: Path) -> dict[str, list[TurnRow]]:
    """Step every method through ``messages``; rows per method."""
    n, budget, max_new = len(messages), args.budget, args.max_new
    sample = sampled_turns(n, args.every)
    restart_at = n // 2 + 1
    layout = ChatLayout(tok, use_template=bool(getattr(tok, "chat_template", None)))
    carried = CarriedArm(model, tok, layout, SYSTEM, max_new)  # ``model`` itself is never enabled
    modes = [m for m in MODES if m in methods or (m == "exact" and "restart" in methods)]
    arms = {}
    for mode in modes:
        own = shared_copy(model)
        arms[mode] = PercacheArm(
            lambda own=own, mode=mode: enable(own, tok, store=tmp / mode, session_kv_tokens=budget,
                                              session_eviction=mode),
            SYSTEM, max_new, quality=mode != "exact")
    rows: dict[str, list[TurnRow]] = {m: [] for m in methods}
    per_token = 0.0
    window_start = 0
    for i, message in enumerate(messages):
        t = i + 1
        earlier = list(carried.turns)
        row = carried.step(message)
        per_token = per_token or row.kv_bytes / max(1, row.prompt_tokens - 1)
        if "carried" in methods:
            rows["carried"].append(row)
        if "restart" in methods and t == restart_at:
            shutil.copytree(tmp / "exact", tmp / "restart")  # the exact arm as saved after turn t - 1
        for mode, arm in arms.items():
            r = arm.step(message, measure_quality=t in sample)
            if mode in methods:
                rows[mode].append(r)
        if "restart" in methods and t == restart_at:
            restarted = PercacheArm(lambda: enable(model, tok, store=tmp / "restart", session_kv_tokens=budget),
                                    SYSTEM, max_new, resume=True)
            rows["restart"].append(restarted.step(message))
            restarted.close()
        full = carried.head + [x for turn in earlier for x in turn] + carried.user
        if "reprefill" in methods:
            rows["reprefill"].append(
                prefill_row(model, tok, t, full, "") if t in sample else
                TurnRow(t, None, len(full), len(full), int(per_token * len(full))))
        if "window" in methods:
            ids, start = window_ids(carried.head, earlier, carried.user, budget, max_new)
            slid, window_start = start > window_start, start
            if t not in sample:
                rows["window"].append(TurnRow(t, None, len(ids) if slid else len(carried.user), len(ids),
                                              int(per_token * len(ids))))
            elif start == 0:  # never slid: the window is the carried cache
                rows["window"].append(TurnRow(t, row.ttft_s, row.computed, row.prompt_tokens, row.kv_bytes))
            else:  # slid: its positions changed, the window is computed again
                rows["window"].append(prefill_row(model, tok, t, ids, "slid" if slid else "prefill"))
        print(f"turn {t}: " + ", ".join(f"{m} {rs[-1].ttft_s:.2f}s" for m, rs in rows.items()
                                        if rs and rs[-1].turn == t and rs[-1].ttft_s is not None), flush=True)
    for arm in arms.values():
        arm.close()
    return rows
