"""``percache bench ttft``: time to first token, plain model vs chunks from a warm on-disk store."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ..bundled import load_smollm2
from ..handle import enable
from .common import (
    DEFAULT_QMSUM,
    THREADS_HELP,
    markdown_table,
    median,
    require_qmsum,
    spread,
    transcript_chunks,
    write_json,
)

__all__ = ["add_arguments", "run"]

SYSTEM = "You are a helpful assistant. Answer the question using the meeting notes."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM, help="QMSum folder (real transcripts)")
    p.add_argument("--chunks", type=int, default=8, help="reusable chunks in the prompt")
    p.add_argument("--words", type=int, default=170, help="words per chunk (about 1.4 tokens each)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs of each side")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--storage-dtype", default=None, help="store K/V as this dtype (default: model's)")
    p.add_argument("--no-verify", action="store_true", help="skip checksum verification on load")
    p.add_argument("--json", type=Path, default=None, help="write the results here")


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_qmsum(args.data)
    torch.set_num_threads(args.threads)
    chunks, query = transcript_chunks(args.data, args.chunks, args.words)
    model, tok = load_smollm2()
    segments = [SYSTEM, *chunks, query]
    gen = {"max_new_tokens": 1, "do_sample": False}
    with tempfile.TemporaryDirectory(prefix="percache-bench-") as store:
        pc = enable(model, tok, store=store, storage_dtype=args.storage_dtype,
                    verify_checksums=not args.no_verify)
        prompt = pc.prompt(segments)
        cold = pc.generate(segments, **gen)  # fills the on-disk store
        plain, cached, reused = [], [], []
        # Interleaved, so both sides see the same machine load; each repeat gives one ratio.
        for _ in tqdm(range(args.repeats), desc="bench ttft", unit="repeat", disable=None):
            with pc.disabled():
                g = pc.generate(segments, **gen)
                plain.append(g.stats.ttft_s)
            pc.disable()
            pc = enable(model, tok, store=store, storage_dtype=args.storage_dtype,
                    verify_checksums=not args.no_verify)  # reopen: K/V from disk
            g = pc.generate(segments, **gen)
            cached.append(g.stats.ttft_s)
            reused.append(g.stats.tokens_reused)
        stored_tokens = sum(p.n_tokens for p in prompt.reusable)
        result = {
            "model": "SmolLM2-135M-Instruct (GGUF Q4_1, fp32)",
            "prompt_tokens": prompt.n_tokens,
            "chunks": args.chunks,
            "repeats": args.repeats,
            "threads": args.threads,
            "ttft_plain_median_s": median(plain),
            "ttft_cached_median_s": median(cached),
            "ratio": median(plain) / median(cached),
            "ratio_per_repeat": [p / c for p, c in zip(plain, cached, strict=True)],
            "ratio_iqr": spread([p / c for p, c in zip(plain, cached, strict=True)]),
            "tokens_reused": reused[-1],
            "tokens_computed": prompt.n_tokens - reused[-1],
            "cold_ttft_s": cold.stats.ttft_s,
            "bytes_stored": pc.store.total_bytes(),
            "bytes_per_token": pc.store.total_bytes() / max(1, stored_tokens),
            "storage_dtype": args.storage_dtype or "model (float32)",
            "verify_checksums": not args.no_verify,
            "plain_s": plain,
            "cached_s": cached,
        }
        pc.disable()
    print(markdown_table(
        ["prompt tokens", "reused", "computed", "TTFT plain (median)", "TTFT cached (median)", "ratio",
         "ratio IQR (per repeat)", "threads", "bytes/token"],
        [[result["prompt_tokens"], result["tokens_reused"], result["tokens_computed"],
          f"{result['ttft_plain_median_s']:.3f} s", f"{result['ttft_cached_median_s']:.3f} s",
          f"{result['ratio']:.1f}x", "{:.1f}x - {:.1f}x".format(*result["ratio_iqr"]), args.threads,
          f"{result['bytes_per_token']:.0f}"]],
    ))
    write_json(args.json, result)
    return result
