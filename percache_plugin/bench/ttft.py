"""``percache bench ttft``: time to first token of a fully cached prompt: plain prefill, the disk
store read cold (files dropped from the page cache) and warm, the RAM tier, and the in-memory
ceiling (``generate`` over a cache already built, only the uncached suffix computed), run with
the handle's attention like the cached arms (``ceiling``) and with the model's own
(``ceiling_model_attention``, the plugin disabled, like ``plain``)."""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import DynamicCache

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

__all__ = ["add_arguments", "run", "drop_page_cache", "ARMS"]

ARMS = ("plain", "disk_cold", "disk_warm", "ram_tier", "ceiling", "ceiling_model_attention")
SYSTEM = "You are a helpful assistant. Answer the question using the meeting notes."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM, help="QMSum folder (real transcripts)")
    p.add_argument("--chunks", type=int, default=8, help="reusable chunks in the prompt")
    p.add_argument("--words", type=int, default=170, help="words per chunk (about 1.4 tokens each)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs of each side")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--storage-dtype", default=None, help="store K/V as this dtype (default: model's)")
    p.add_argument("--no-verify", action="store_true", help="skip checksum verification on load")
    p.add_argument("--ram-bytes", type=int, default=256 * 2**20, help="RAM tier budget of the RAM arm")
    p.add_argument("--json", type=Path, default=None, help="write the results here")


def drop_page_cache(folder: str | Path) -> int:
    """Drop every file under ``folder`` from the OS page cache (``posix_fadvise(DONTNEED)``; the
    files are clean, written with fsync); returns the number of files."""
    n = 0
    for path in Path(folder).rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            n += 1
    return n


def _ceiling(model: Any, ids: torch.Tensor, cache: Any) -> float:
    """``generate`` over a cache already in memory: only the uncached suffix is computed."""
    t0 = time.perf_counter()
    model.generate(ids, past_key_values=cache, max_new_tokens=1, do_sample=False)
    return time.perf_counter() - t0


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_qmsum(args.data)
    torch.set_num_threads(args.threads)
    chunks, query = transcript_chunks(args.data, args.chunks, args.words)
    model, tok = load_smollm2(status=True)
    segments = [SYSTEM, *chunks, query]
    gen = {"max_new_tokens": 1, "do_sample": False}
    opts = {"storage_dtype": args.storage_dtype, "verify_checksums": not args.no_verify}
    with tempfile.TemporaryDirectory(prefix="percache-bench-") as store:
        # One open handle at a time: a handle owns the model's attention while it is open.
        pc = enable(model, tok, store=store, ram_cache_bytes=0, **opts)
        prompt = pc.prompt(segments)
        cold = pc.generate(segments, **gen)  # fills the on-disk store
        ids = torch.tensor([prompt.input_ids])
        # The ceiling holds the same cached prefix as the store arms (the reusable chunks) and
        # computes the same suffix (the question), so only loading differs.
        n_cached = min(sum(p.n_tokens for p in prompt.reusable), prompt.n_tokens - 1)
        with pc.disabled(), torch.no_grad():
            full = DynamicCache()
            model(ids[:, :n_cached], past_key_values=full, use_cache=True)
        bytes_stored = pc.store.total_bytes()
        pc.close()
        arms: dict[str, list[float]] = {a: [] for a in ARMS}
        reused: dict[str, int] = {}
        # Interleaved, so every arm sees the same machine load.
        for _ in tqdm(range(args.repeats), desc="bench ttft", unit="repeat", disable=None):
            for arm in ("disk_cold", "disk_warm"):
                if arm == "disk_cold":
                    drop_page_cache(Path(store) / "kv")
                disk = enable(model, tok, store=store, ram_cache_bytes=0, **opts)  # reopen: K/V from disk
                g = disk.generate(segments, **gen)
                disk.close()
                arms[arm].append(g.stats.ttft_s)
                reused[arm] = g.stats.tokens_reused
            ram = enable(model, tok, store=store, ram_cache_bytes=args.ram_bytes, **opts)
            ram.generate(segments, **gen)  # fills the RAM tier (untimed)
            g = ram.generate(segments, **gen)
            arms["ram_tier"].append(g.stats.ttft_s)
            reused["ram_tier"] = g.stats.tokens_reused
            with torch.no_grad():  # the same attention as the cached arms (the handle's)
                arms["ceiling"].append(_ceiling(model, ids, copy.deepcopy(full)))
            with ram.disabled():
                arms["plain"].append(ram.generate(segments, **gen).stats.ttft_s)
                with torch.no_grad():  # the model's own attention
                    arms["ceiling_model_attention"].append(_ceiling(model, ids, copy.deepcopy(full)))
            ram.close()
        stored_tokens = sum(p.n_tokens for p in prompt.reusable)
        med = {a: median(v) for a, v in arms.items()}
        result = {
            "model": "SmolLM2-135M-Instruct (GGUF Q4_1, fp32)",
            "prompt_tokens": prompt.n_tokens,
            "chunks": args.chunks,
            "repeats": args.repeats,
            "threads": args.threads,
            "ram_cache_bytes": args.ram_bytes,
            "ttft_median_s": med,
            "speedup_vs_plain": {a: med["plain"] / med[a] for a in ARMS},
            "ram_tier_vs_ceiling": med["ram_tier"] / med["ceiling"],
            "tokens_reused": {**reused, "ceiling": n_cached},
            "cold_ttft_s": cold.stats.ttft_s,
            "bytes_stored": bytes_stored,
            "bytes_per_token": bytes_stored / max(1, stored_tokens),
            "storage_dtype": args.storage_dtype or "model (float32)",
            "verify_checksums": not args.no_verify,
            "runs_s": arms,
            # kept for the earlier two-arm readers
            "ttft_plain_median_s": med["plain"],
            "ttft_cached_median_s": med["disk_warm"],
            "ratio": med["plain"] / med["disk_warm"],
            "ratio_iqr": spread([p / c for p, c in zip(arms["plain"], arms["disk_warm"], strict=True)]),
        }
    print(markdown_table(
        ["arm", "TTFT (median)", "vs plain", "tokens reused"],
        [[a, f"{med[a]:.3f} s", f"{med['plain'] / med[a]:.1f}x", reused.get(a, n_cached if a.startswith("ceiling") else 0)]
         for a in ARMS],
    ))
    print(f"prompt {prompt.n_tokens} tokens; RAM tier / ceiling = {result['ram_tier_vs_ceiling']:.2f}")
    write_json(args.json, result)
    return result
