"""TTFT of a chat turn with k recalled facts: in the turn as text (``memory_recall_mode='text'``)
vs the session's memory region with the facts' stored K/V spliced ('splice'), and the region
prefilled instead of spliced ('splice-exact' when no exact K/V is stored) as the exact reference
for the same ids. SmolLM2-135M, 1 torch thread, modes interleaved in every repeat, medians.

Facts are LoCoMo ``observation`` facts of one conversation; recall is fixed to the same k facts
for every mode (``sessions.memory.recall`` replaced), so only where the facts go differs. Scenarios:

* ``new-session-shifted``: another session with another system prompt computed and stored the
  facts' K/V first; the measured turn opens a new session (splice: RoPE-shifted, first
  ``memory_recompute_head`` tokens of each fact recomputed; approximate).
* ``new-session-exact``: the same system prompt stored them at the same positions (exact splice).
* ``steady``: a turn after ``--history`` turns that recalled the same facts (the region is
  already in the session's cache; text mode prefills the facts again in the turn).
* ``changed``: a turn after ``--history`` turns whose recalled facts differ from the region's
  (the turns after the region are computed again: exact, counted in history_recomputed).

``cpu_s`` is the process CPU time of the measured ``chat`` call (1 torch thread, so it is the
turn's compute, less disturbed than wall time by other processes on a shared machine); with
``--answer 1`` it covers recall, the region, the prefill and one token.

For the shifted scenario the first-token distribution of 'splice' is compared with
'splice-exact' over the same ids (KL, top-1) and the greedy answers of ``--answer`` tokens.

    python benchmarks/memory_splice.py --repeats 5 > memory_splice.json            # answers of 16 tokens
    python benchmarks/memory_splice.py --repeats 5 --answer 1 > memory_splice_ttft.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from percache_plugin import enable
from percache_plugin.bundled import load_smollm2

SYSTEM_A = "You are a helpful assistant who remembers what the user told you."
SYSTEM_B = "You are a friendly assistant. Use what you remember about the user when it helps."
MODES = ("text", "splice-exact", "splice")


def _facts(data: Path, n: int) -> list[str]:
    conv = json.loads(data.read_text())[0]
    out: list[str] = []
    for session in conv["observation"].values():
        for facts in session.values():
            out += [f for f, _ in facts]
    return out[:n]


def _messages(data: Path, n: int) -> list[str]:
    conv = json.loads(data.read_text())[0]["conversation"]
    return [t["text"] for t in conv["session_1"]][:n]


def _handle(model: Any, tok: Any, mode: str, recalled: list[list[str]]) -> Any:
    """A handle whose memory holds the facts and whose recall returns ``recalled[i]`` at turn i."""
    pc = enable(model, tok, predict="off", embedder="hash", memory_recall=True,
                memory_recall_mode=mode, session_blocks=False, ram_cache_bytes=0)
    ids = {t: pc.memory.add(t).fact.id for turn in recalled for t in turn}
    queue = iter([[(ids[t], t) for t in turn] for turn in recalled])
    pc.sessions.memory.recall = lambda message, scope: next(queue)
    return pc


def _turn(pc: Any, message: str, session: str, new: int) -> Any:
    return pc.chat(message, session=session, max_new_tokens=new, do_sample=False)


def scenario(model: Any, tok: Any, name: str, mode: str, facts: list[str], other: list[str], messages: list[str], history: int, answer: int) -> dict[str, Any]:
    k = len(facts)
    if name.startswith("new-session"):
        pc = _handle(model, tok, mode, [facts, facts])
        pc.sessions.create("first", system=SYSTEM_A)
        _turn(pc, messages[0], "first", 1)  # computes and stores the facts' K/V
        pc.sessions.create("measured", system=SYSTEM_A if name.endswith("exact") else SYSTEM_B)
        cpu = time.process_time()
        reply = _turn(pc, messages[1], "measured", answer)
    else:
        last = other if name == "changed" else facts
        pc = _handle(model, tok, mode, [facts] * history + [last])
        pc.sessions.create("measured", system=SYSTEM_A)
        for m in messages[:history]:
            _turn(pc, m, "measured", 8)
        cpu = time.process_time()
        reply = _turn(pc, messages[history], "measured", answer)
    cpu = time.process_time() - cpu
    s = reply.stats
    pc.close()
    return {"ttft_s": s.ttft_s, "cpu_s": cpu, "tokens_computed": s.tokens_computed, "prompt_tokens": s.prompt_tokens,
            "memory_tokens": s.memory_tokens, "spliced": s.memory_spliced_tokens,
            "shifted": s.memory_shifted_tokens, "recomputed": s.memory_recomputed_tokens,
            "history_recomputed": s.history_recomputed, "approximate": s.approximate, "k": k,
            "answer": reply.token_ids, "logits": reply.first_logits}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path("../shared/data/locomo/locomo_dev5.json"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--history", type=int, default=4)
    ap.add_argument("--answer", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load_smollm2()
    texts = _facts(args.data, 2 * args.k)
    facts, other = texts[:args.k], texts[args.k:]
    messages = _messages(args.data, args.history + 1)
    names = ("new-session-shifted", "new-session-exact", "steady", "changed")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {n: {m: [] for m in MODES} for n in names}
    t0 = time.perf_counter()
    for _ in range(args.repeats):
        for name in names:
            for mode in MODES:
                runs[name][mode].append(scenario(model, tok, name, mode, facts, other, messages,
                                                 args.history, args.answer))
    out: dict[str, Any] = {"k": args.k, "history": args.history, "repeats": args.repeats,
                           "threads": 1, "wall_s": round(time.perf_counter() - t0, 1), "scenarios": {}}
    for name in names:
        row: dict[str, Any] = {}
        for mode in MODES:
            rs = runs[name][mode]
            first = {key: v for key, v in rs[0].items() if key not in ("answer", "logits", "ttft_s", "cpu_s")}
            row[mode] = {"ttft_median_s": round(statistics.median(r["ttft_s"] for r in rs), 4),
                         "cpu_median_s": round(statistics.median(r["cpu_s"] for r in rs), 4),
                         "ttft_s": [round(r["ttft_s"], 4) for r in rs], **first}
        ref, got = runs[name]["splice-exact"][0], runs[name]["splice"][0]
        if ref["logits"] is not None and got["logits"] is not None:
            p, q = ref["logits"].log_softmax(-1), got["logits"].log_softmax(-1)
            row["splice_vs_exact"] = {
                "kl": float(torch.nn.functional.kl_div(q, p, log_target=True, reduction="sum")),
                "top1_same": bool(p.argmax() == q.argmax()),
                "answer_same": ref["answer"] == got["answer"]}
        out["scenarios"][name] = row
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
