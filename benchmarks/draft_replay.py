"""Replay drafted decoding offline: which drafts a schedule verifies, and what that costs.

With greedy decoding the output is fixed (the plain answer), so which draft tokens stand is
known without the model. ``percache bench decode --trace`` records each request's prompt,
draft sources and plain output; this script runs the real decoding loop
(:class:`~percache_plugin.decode.verify.DraftedDecoding`) over a stand-in model whose argmax is
the recorded answer, counts forwards and draft lengths, and prices each forward with a verify
cost curve (``benchmarks/verify_cost.py --json``). The predicted speed-up of an answer is its
plain forwards over the summed cost of its drafted forwards. Answers are replayed in the
benchmark's order, so the schedule's history across answers builds up as it would (one history
per meeting, as the benchmark uses one handle per meeting).

    python benchmarks/draft_replay.py TRACE.json [--cost vc.json [--setup packed]] [--margin 1.0] [--prior 1 1] [--tree]
        [--price curve.json] [--truncate N]

It also reports the decode phase (the tokens after the first forward over the cost of the
forwards after it), and ``--truncate N`` replays every answer cut to its first N tokens: short
answers, where a rejected draft weighs most, from the same development traces.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from transformers import EosTokenCriteria, GenerationConfig, MaxLengthCriteria, StoppingCriteriaList

from percache_plugin.decode.acceptance import AcceptanceHistory
from percache_plugin.decode.cost import SMOLLM2_CPU_COST_PACKED, VerifyCost
from percache_plugin.decode.lookup import MAX_NGRAM, MIN_NGRAM
from percache_plugin.decode.schedule import DraftSchedule
from percache_plugin.decode.sources import DraftSource
from percache_plugin.decode.verify import DraftedDecoding


class _Cache:
    layers: list[Any] = []  # no K/V to move when a token tree's walked path is kept

    def __init__(self, n: int) -> None:
        self.n = n

    def get_seq_length(self) -> int:
        return self.n

    def crop(self, k: int) -> None:
        self.n += k


class _Oracle:
    """A stand-in model whose next token is always the recorded greedy answer's."""

    def __init__(self, full: list[int], vocab: int) -> None:
        self.full, self.vocab, self.fed = full, vocab, []

    def forward(self, input_ids: torch.Tensor, past_key_values: _Cache, use_cache: bool = True,
                logits_to_keep: int = 0, position_ids: Any = None, attention_mask: Any = None) -> Any:
        n, start = input_ids.shape[1], past_key_values.n
        past_key_values.n += n
        self.fed.append(n - 1)
        logits = torch.zeros(1, n, self.vocab)
        for j in range(n):
            # a token tree's node sits at the position of its depth: the answer's token after it
            # (only nodes on the walked path, whose tokens are the answer's, are ever read)
            nxt = int(position_ids[0, j]) + 1 if position_ids is not None else start + j + 1
            logits[0, j, self.full[nxt] if nxt < len(self.full) else 0] = 1.0
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)

    __call__ = forward


def replay(row: dict[str, Any], schedule: DraftSchedule, only: Any, new_tokens: int, eos: set[int],
           tree: bool = False, **index: Any) -> tuple[list[int], int]:
    """Draft tokens fed per forward when decoding ``row`` with ``schedule``, and the tokens the
    first forward emitted. As in the benchmark,
    decoding stops at ``new_tokens`` or at an eos token, so a draft near the end may run past the
    answer's last token (those tokens are fed, and counted as drafted, but never kept)."""
    tr = row["trace"]
    sources = [DraftSource(s["name"], tuple(tuple(q) for q in s["sequences"]), s["anchored"])
               for s in tr["sources"]]
    prompt, plain = tr["prompt"], tr["plain"]
    full = prompt + plain
    model = _Oracle(full, max([*full, *eos]) + 2)
    dec = DraftedDecoding.from_sources(sources, prompt, only, schedule, **index)
    dec.tree = tree
    criteria: list[Any] = [MaxLengthCriteria(len(prompt) + max(new_tokens, len(plain)))]
    if eos:
        criteria.append(EosTokenCriteria(sorted(eos)))
    out = dec(model, torch.tensor([prompt]), lambda ids, s: s, StoppingCriteriaList(criteria),
              GenerationConfig(do_sample=False, return_dict_in_generate=False),
              past_key_values=_Cache(len(prompt) - 1))
    assert out[0, len(prompt):].tolist() == plain, "replay diverged from the recorded answer"
    return model.fed, dec.counts.first_tokens


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("trace", type=Path)
    p.add_argument("--cost", type=Path, default=None, help="verify_cost.py --json output")
    p.add_argument("--setup", default="packed", help="the set-up of a --cost file measuring several")
    p.add_argument("--margin", type=float, default=1.0)
    p.add_argument("--prior", type=float, nargs=2, default=(DraftSchedule.prior_accepted, DraftSchedule.prior_rejected))
    p.add_argument("--only", default=None, help="comma-separated draft sources (default: every source and the output)")
    p.add_argument("--cap", type=float, default=40.0)
    p.add_argument("--max-length", type=int, default=16)
    p.add_argument("--min-ngram", type=int, default=MIN_NGRAM, help="shortest n-gram matched")
    p.add_argument("--max-ngram", type=int, default=MAX_NGRAM, help="longest n-gram matched")
    p.add_argument("--truncate", type=int, default=None,
                   help="replay each answer cut to its first N tokens (short answers from the same traces)")
    p.add_argument("--price", type=Path, default=None, help="price the forwards with this curve (a JSON list of ratios for k = 1, 2, ...) instead "
                        "of the one the schedule chooses with, e.g. one measured at another load")
    p.add_argument("--tree", action="store_true", help="verify token trees (Config.draft_tree)")
    p.add_argument("--rows", action="store_true", help="print every answer")
    p.add_argument("--kinds", action="store_true",
                   help="print the acceptance by draft kind (every draft verified: cost 1.0 for the choice)")
    args = p.parse_args()
    cost = SMOLLM2_CPU_COST_PACKED  # what drafted decoding uses by default on the CPU
    if args.cost is not None:
        ratio = json.loads(args.cost.read_text())["ratio"]
        if args.setup in ratio:  # verify_cost.py measures several set-ups side by side
            ratio = ratio[args.setup]
        cost = VerifyCost.of([ratio[str(k)] for k in range(1, len(ratio))])
    payload = json.loads(args.trace.read_text())
    rows = payload["rows"]
    new_tokens = int(payload.get("new_tokens", 64))
    # the answers that stopped before the budget ended on the tokenizer's eos token
    eos = {r["trace"]["plain"][-1] for r in rows if 0 < len(r["trace"]["plain"]) < new_tokens}
    if args.truncate is not None:
        new_tokens = args.truncate
        for r in rows:
            r["trace"]["plain"] = r["trace"]["plain"][:args.truncate]
    choose = VerifyCost((1.0,)) if args.kinds else cost
    if args.price is not None:
        cost = VerifyCost.of(json.loads(args.price.read_text()))
    speed, dspeed, fwd_all, drafted_fwd = [], [], 0, 0
    history: dict[str, AcceptanceHistory] = {}
    for row in rows:
        hist = history.setdefault(row["meeting"], AcceptanceHistory(args.cap))
        sched = DraftSchedule(cost=choose, history=hist, max_length=args.max_length,
                              prior_accepted=args.prior[0], prior_rejected=args.prior[1], margin=args.margin)
        fed, first = replay(row, sched, None if args.only is None else tuple(args.only.split(",")), new_tokens, eos,
                     args.tree, min_ngram=args.min_ngram, max_ngram=args.max_ngram)
        spent = sum(cost(k) for k in fed)
        plain = len(row["trace"]["plain"])
        speed.append(plain / spent)
        rest = sum(cost(k) for k in fed[1:])
        dspeed.append((plain - first) / rest if rest and plain > 1 else float("nan"))
        fwd_all += len(fed)
        drafted_fwd += sum(k > 0 for k in fed)
        if args.rows:
            print(f"{row['question'][:40]:40s} {plain / spent:5.2f}x decode {dspeed[-1]:5.2f}x forwards {len(fed):3d} "
                  f"(drafted {sum(k > 0 for k in fed)}) k={fed}")
    if args.kinds:
        total: dict[str, list[float]] = {}
        for h in history.values():
            for kind, t in h.kinds().items():
                acc = total.setdefault(kind, [0.0, 0.0])
                acc[0] += t.accepted
                acc[1] += t.rejected
        for kind, (a, r) in sorted(total.items()):
            print(f"{kind:16s} accepted {a:7.1f} rejected {r:6.1f} p {a / max(a + r, 1e-9):.2f}")
    dec = [d for d in dspeed if d == d]
    print(f"decode phase: median {statistics.median(dec):.2f}x, min {min(dec):.2f}x, <0.95: {sum(d < 0.95 for d in dec)}")
    print(f"predicted median {statistics.median(speed):.2f}x, min {min(speed):.2f}x, "
          f"<0.95: {sum(s < 0.95 for s in speed)}/{len(speed)}, forwards {fwd_all} "
          f"({drafted_fwd} with drafts) vs {sum(len(r['trace']['plain']) for r in rows)} plain")


if __name__ == "__main__":
    main()
