"""``percache bench ttft``: time to first token of a fully cached prompt: plain prefill, the disk
store read cold (files dropped from the page cache) and warm, the RAM tier, and the in-memory
ceiling (``generate`` over a cache already built, only the uncached suffix computed), run with
the handle's attention like the cached arms (``ceiling``) and with the model's own
(``ceiling_model_attention``, the plugin disabled, like ``plain``).

Each repeat runs every arm once, in the orders of a balanced Latin square
(:mod:`~percache_plugin.bench.arm_order`): over 6 repeats every arm runs directly after every
other arm once, so no arm always meets the memory state one particular arm leaves behind; the
result gives the RAM tier's and the ceiling's medians per arm run just before them, and each
arm's minor page faults. The RAM tier and the ceiling arms both time their second request (the
first fills the tier, or runs the ceiling once untimed)."""

from __future__ import annotations

import argparse
import copy
import os
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import DynamicCache

from ..bundled import load_smollm2
from ..cache_arg import cache_kw
from ..handle import enable
from .arm_order import arm_orders, balanced_repeats, predecessors
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

__all__ = ["add_arguments", "run", "drop_page_cache", "fill", "Filled", "ARMS"]

RAM_TIER_PLUGIN = "percache_plugin.buffer.plugin:RamTierKV"  # its name in a handle's plugin manager
ARMS = ("plain", "disk_cold", "disk_warm", "ram_tier", "ceiling", "ceiling_model_attention")
SYSTEM = "You are a helpful assistant. Answer the question using the meeting notes."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM, help="QMSum folder (real transcripts)")
    p.add_argument("--chunks", type=int, default=8, help="reusable chunks in the prompt")
    p.add_argument("--words", type=int, default=170, help="words per chunk (about 1.4 tokens each)")
    p.add_argument("--repeats", type=int, default=6, help="timed runs of each arm, in rotated orders (balanced over a multiple of 6)")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--storage-dtype", default=None, help="store K/V as this dtype (default: model's)")
    p.add_argument("--no-verify", action="store_true", help="skip checksum verification on load")
    p.add_argument("--ram-bytes", type=int, default=256 * 2**20, help="RAM tier budget of the RAM arm")
    p.add_argument("--no-join-buffers", action="store_true",
                   help="the RAM arm's handle joins into fresh memory (ram_join_buffers=False), for comparison")
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


@dataclass(frozen=True)
class Filled:
    """What :func:`fill` made: the prompt, its ids ``[1, n]``, the positions the cached arms and
    the ceiling serve from cache, the ceiling's cache, the filling request and the store's size."""

    prompt: Any
    ids: torch.Tensor
    n_cached: int
    full: DynamicCache
    cold: Any
    bytes_stored: int


def fill(model: Any, tok: Any, store: str | Path, segments: list[str], **opts: Any) -> Filled:
    """Answer ``segments`` once through a handle on ``store`` without a RAM tier (``opts``: more
    settings), which stores the prompt's K/V, and build the ceiling's cache: the same reusable
    chunks as the store arms serve, prefilled with the model's own attention, so that only
    loading differs (the ceiling computes the same suffix, the question)."""
    gen = {"max_new_tokens": 1, "do_sample": False}
    # One open handle at a time: a handle owns the model's attention while it is open.
    with enable(model, tok, store=store, ram_cache_bytes=0, **opts) as pc:
        prompt = pc.prompt(segments)
        cold = pc.generate(segments, **gen)  # fills the on-disk store
        ids = torch.tensor([prompt.input_ids])
        n_cached = min(sum(p.n_tokens for p in prompt.reusable), prompt.n_tokens - 1)
        with pc.disabled(), torch.no_grad():
            full = DynamicCache()
            model(ids[:, :n_cached], **cache_kw(full), use_cache=True)
        return Filled(prompt, ids, n_cached, full, cold, pc.store.total_bytes())


def _ceiling(model: Any, ids: torch.Tensor, full: Any) -> tuple[float, int]:
    """``generate`` over a cache already in memory: only the uncached suffix is computed. One
    untimed request first, like the RAM tier arm's fill request, so both arms time their second
    request of their kind; ``generate`` extends the cache it gets, hence a copy per request."""
    with torch.no_grad():
        model.generate(ids, **cache_kw(copy.deepcopy(full)), max_new_tokens=1, do_sample=False)
        cache = copy.deepcopy(full)
        f0, t0 = _faults(), time.perf_counter()
        model.generate(ids, **cache_kw(cache), max_new_tokens=1, do_sample=False)
        return time.perf_counter() - t0, _faults() - f0


def _faults() -> int:
    """Minor page faults of this process so far (fresh pages the allocator touched)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_qmsum(args.data)
    torch.set_num_threads(args.threads)
    chunks, query = transcript_chunks(args.data, args.chunks, args.words)
    model, tok = load_smollm2(status=True)
    segments = [SYSTEM, *chunks, query]
    gen = {"max_new_tokens": 1, "do_sample": False}
    opts = {"storage_dtype": args.storage_dtype, "verify_checksums": not args.no_verify}
    with tempfile.TemporaryDirectory(prefix="percache-bench-") as store:
        filled = fill(model, tok, store, segments, **opts)
        prompt, ids, n_cached, full = filled.prompt, filled.ids, filled.n_cached, filled.full
        cold, bytes_stored = filled.cold, filled.bytes_stored
        reused: dict[str, int] = {"ceiling": n_cached, "ceiling_model_attention": n_cached}
        join_reuses: list[int] = []  # per timed RAM-tier request: joins into memory lent again
        last: dict[str, Any] = {}

        def timed(arm: str, h: Any) -> tuple[float, int]:
            f0 = _faults()
            g = h.generate(segments, **gen)
            reused[arm], last[arm] = g.stats.tokens_reused, g.stats
            return g.stats.ttft_s, _faults() - f0

        def disk(arm: str) -> tuple[float, int]:
            if arm == "disk_cold":
                drop_page_cache(Path(store) / "kv")
            with enable(model, tok, store=store, ram_cache_bytes=0, **opts) as h:  # K/V from disk
                return timed(arm, h)

        def ram_tier(arm: str) -> tuple[float, int]:
            with enable(model, tok, store=store, ram_cache_bytes=args.ram_bytes,
                        ram_join_buffers=not args.no_join_buffers, **opts) as h:
                h.generate(segments, **gen)  # fills the RAM tier (untimed)
                tier = h.plugins.get_plugin(RAM_TIER_PLUGIN)
                assert tier is not None, "the RAM tier plugin is built in"
                before = tier.ram_tier_stats().get("join_reuses", 0)
                out = timed(arm, h)
                join_reuses.append(int(tier.ram_tier_stats().get("join_reuses", 0) - before))
            if last[arm].ram_hits != last[arm].nodes_reused:
                raise RuntimeError(f"the RAM tier arm read nodes from disk: {last[arm]}")
            return out

        def ceiling(arm: str) -> tuple[float, int]:  # the same attention as the cached arms (the handle's)
            with enable(model, tok, store=store, ram_cache_bytes=0, **opts):
                return _ceiling(model, ids, full)

        def plain(arm: str) -> tuple[float, int]:  # the model's own attention, every token computed
            with enable(model, tok, store=store, ram_cache_bytes=0, **opts) as h, h.disabled():
                return timed(arm, h) if arm == "plain" else _ceiling(model, ids, full)

        do = {"plain": plain, "disk_cold": disk, "disk_warm": disk, "ram_tier": ram_tier,
              "ceiling": ceiling, "ceiling_model_attention": plain}
        orders = arm_orders(ARMS, args.repeats)
        arms: dict[str, list[float]] = {a: [] for a in ARMS}
        faults: dict[str, list[int]] = {a: [] for a in ARMS}
        # Every arm follows every other arm equally often (a balanced Latin square over the
        # repeats), so no arm is favoured by the memory state the one before leaves behind.
        for order in tqdm(orders, desc="bench ttft", unit="repeat", disable=None):
            for arm in order:
                t, f = do[arm](arm)
                arms[arm].append(t)
                faults[arm].append(f)
        before = predecessors(orders)
        med = {a: median(v) for a, v in arms.items()}
        by_order = _by_predecessor(arms, before, ("ram_tier", "ceiling"))
        stored_tokens = sum(p.n_tokens for p in prompt.reusable)
        result = {
            "model": "SmolLM2-135M-Instruct (GGUF Q4_1, fp32)",
            "prompt_tokens": prompt.n_tokens,
            "chunks": args.chunks,
            "repeats": args.repeats,
            "threads": args.threads,
            "ram_cache_bytes": args.ram_bytes,
            "ram_join_buffers": not args.no_join_buffers,
            "ttft_median_s": med,
            "speedup_vs_plain": {a: med["plain"] / med[a] for a in ARMS},
            "ram_tier_vs_ceiling": med["ram_tier"] / med["ceiling"],
            "ram_tier_vs_ceiling_paired": median([r / c for r, c in zip(arms["ram_tier"], arms["ceiling"], strict=True)]),
            "orders": orders,
            "balanced": args.repeats % balanced_repeats(len(ARMS)) == 0,
            "predecessors": before,
            "median_by_predecessor_s": by_order,
            "minor_faults_median": {a: median([float(x) for x in v]) for a, v in faults.items()},
            "minor_faults": faults,
            "ram_tier_join_reuses": join_reuses,
            "tokens_reused": reused,
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
    print(f"prompt {prompt.n_tokens} tokens; RAM tier / ceiling = {result['ram_tier_vs_ceiling']:.2f} "
          f"(paired {result['ram_tier_vs_ceiling_paired']:.2f}; arm orders "
          f"{'balanced' if result['balanced'] else 'not balanced: repeats not a multiple of ' + str(balanced_repeats(len(ARMS)))})")
    print(markdown_table(
        ["run just before", *(f"{a} (median, n)" for a in by_order)],
        [[p, *(f"{by_order[a][p][0]:.3f} s, {by_order[a][p][1]}" if p in by_order[a] else "-" for a in by_order)]
         for p in ["start", *ARMS]
         if any(p in by_order[a] for a in by_order)],
    ))
    print("minor page faults of the timed request (median): " + ", ".join(
        f"{a} {result['minor_faults_median'][a]:.0f}" for a in ARMS)
        + f"; RAM tier joins into lent memory per request: {sorted(set(join_reuses))}")
    write_json(args.json, result)
    return result


def _by_predecessor(arms: dict[str, list[float]], before: list[dict[str, str]],
                    which: tuple[str, ...]) -> dict[str, dict[str, tuple[float, int]]]:
    """Per arm in ``which``: its median time and count per arm run just before it."""
    out: dict[str, dict[str, tuple[float, int]]] = {}
    for arm in which:
        groups: dict[str, list[float]] = {}
        for t, prev in zip(arms[arm], before, strict=True):
            groups.setdefault(prev[arm], []).append(t)
        out[arm] = {p: (median(v), len(v)) for p, v in sorted(groups.items())}
    return out
