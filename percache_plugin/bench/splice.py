"""``percache bench splice``: quality and speed of shifted chunk reuse per recompute strategy.

Each sample is a real QMSum transcript cut into chunks. The chunks are cached in one order (or
one by one), then asked in another order, so no exact prefix beyond the system prompt exists.
For each strategy and budget: KL and top-1 agreement of next-token distributions over the first
answer tokens (teacher-forced on the full-prefill answer), ROUGE-L of the greedy answer vs the
full-prefill answer, and time to first token vs full prefill, measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ..bundled import load_smollm2
from ..cache_arg import cache_kw
from ..handle import PerCache, enable
from .common import (
    DEFAULT_QMSUM,
    THREADS_HELP,
    markdown_table,
    median,
    require_qmsum,
    transcript_chunks,
    write_json,
)
from .metrics import kl_and_top1, rouge_l

__all__ = ["add_arguments", "run", "DEFAULT_STRATEGIES"]

SYSTEM = "You are a helpful assistant. Answer the question using the meeting transcript."
DEFAULT_STRATEGIES = (
    "none", "head:0.05", "head:0.10", "head:0.15", "head:0.25",
    "tail:0.05", "tail:0.10", "tail:0.15", "tail:0.25",
    "deviation:0.05", "deviation:0.10", "deviation:0.15", "deviation:0.25", "all",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM, help="QMSum folder")
    p.add_argument("--samples", type=int, default=4, help="prompts (meetings)")
    p.add_argument("--chunks", type=int, default=6, help="chunks per prompt (4-8)")
    p.add_argument("--words", type=int, default=230, help="words per chunk")
    p.add_argument("--forced", type=int, default=32, help="teacher-forced answer tokens")
    p.add_argument("--answer-tokens", type=int, default=64, help="greedy answer length")
    p.add_argument("--strategies", nargs="+", default=list(DEFAULT_STRATEGIES),
                   help="recompute strategies to compare (Config.recompute values; default: none, "
                        "head/tail/deviation at 0.05-0.25, all)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per side (median)")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--json", type=Path, default=None)


def _forced_logits(pc: PerCache, segments: list[str], answer: list[int]) -> tuple[torch.Tensor, Any]:
    """Next-token logits at the last prompt position and along ``answer`` (teacher forcing)."""
    pre = pc.prefill(segments)
    ids = torch.tensor([pre.prompt.input_ids[-1:] + answer[:-1]])
    with torch.inference_mode():
        out = pc.model(input_ids=ids, **cache_kw(pre.cache), use_cache=True)
    return out.logits[0].float(), pre.stats


def _sample(args: argparse.Namespace, i: int) -> tuple[list[str], list[str], list[str], str]:
    chunks, query = transcript_chunks(args.data, args.chunks, args.words, meeting=i)
    order = list(range(len(chunks)))
    rng = random.Random(i)
    while order == sorted(order):
        rng.shuffle(order)
    separately = i % 2 == 1  # odd samples: each chunk cached alone after the system prompt
    return chunks, [chunks[j] for j in order], ["separately" if separately else "in order"], query


@contextlib.contextmanager
def _fresh(model: Any, tok: Any, populated: Path, strategy: str) -> Iterator[PerCache]:
    """A handle on a private copy of the populated store: what one measurement stores (an
    exact copy of the reordered prompt after ``all``) must not serve the next one."""
    with tempfile.TemporaryDirectory(prefix="percache-splice-") as tmp:
        shutil.copytree(populated, Path(tmp) / "s")
        pc = enable(model, tok, store=Path(tmp) / "s", reuse="shifted", recompute=strategy)
        try:
            yield pc
        finally:
            pc.disable()


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_qmsum(args.data)
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2(status=True)
    rows: dict[str, list[dict[str, float]]] = {s: [] for s in args.strategies}
    examples = []
    for i in tqdm(range(args.samples), desc="samples"):
        chunks, shuffled, (mode,), query = _sample(args, i)
        segments = [SYSTEM, *shuffled, query]
        with tempfile.TemporaryDirectory(prefix="percache-splice-base-") as base:
            pc = enable(model, tok, store=base)
            for seg in ([[SYSTEM, c, query] for c in chunks] if mode == "separately"
                        else [[SYSTEM, *chunks, query]]):
                pc.prefill(seg)
            with pc.disabled():
                full = pc.generate(segments, max_new_tokens=args.answer_tokens, do_sample=False)
                ref_logits, _ = _forced_logits(pc, segments, full.token_ids[: args.forced])
                full_ttft = median([pc.generate(segments, max_new_tokens=1).stats.ttft_s
                                    for _ in range(args.repeats)])
            pc.disable()
            for strategy in tqdm(args.strategies, desc="strategies", leave=False):
                ttfts = []
                for _ in range(args.repeats):
                    with _fresh(model, tok, Path(base), strategy) as pc:
                        ttfts.append(pc.generate(segments, max_new_tokens=1).stats.ttft_s)
                with _fresh(model, tok, Path(base), strategy) as pc:
                    logits, st = _forced_logits(pc, segments, full.token_ids[: args.forced])
                with _fresh(model, tok, Path(base), strategy) as pc:
                    g = pc.generate(segments, max_new_tokens=args.answer_tokens, do_sample=False)
                kl, top1 = kl_and_top1(ref_logits, logits)
                ttft = median(ttfts)
                shifted_total = st.tokens_shifted + st.tokens_recomputed
                rows[strategy].append({
                    "kl": kl, "top1": top1, "rouge_l": rouge_l(g.text, full.text),
                    "speedup": full_ttft / ttft, "ttft_s": ttft, "full_ttft_s": full_ttft,
                    "recomputed_share": st.tokens_recomputed / max(1, shifted_total),
                    "prompt_tokens": st.prompt_tokens, "tokens_shifted": st.tokens_shifted,
                    "tokens_recomputed": st.tokens_recomputed, "tokens_computed": st.tokens_computed,
                    "tokens_reused": st.tokens_reused,
                })
                if strategy == args.strategies[-1] or strategy == "deviation:0.15":
                    examples.append({"strategy": strategy, "mode": mode, "query": query,
                                     "full": full.text, "spliced": g.text})
    table = []
    summary = {}
    for s, rs in rows.items():
        agg = {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]}
        agg["speedup_median"] = median([r["speedup"] for r in rs])
        summary[s] = agg
        table.append([s, f"{agg['recomputed_share']:.1%}", f"{agg['kl']:.3f}", f"{agg['top1']:.2f}",
                      f"{agg['rouge_l']:.2f}", f"{agg['speedup_median']:.1f}x", int(agg["prompt_tokens"])])
    print(markdown_table(["strategy", "recomputed", "KL", "top-1", "ROUGE-L vs full", "TTFT speed-up",
                          "prompt tokens"], table))
    result = {"samples": args.samples, "chunks": args.chunks, "words": args.words,
              "forced": args.forced, "summary": summary, "rows": rows, "examples": examples}
    write_json(args.json, result)
    return result
