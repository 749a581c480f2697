"""Where a request's minor page faults happen: per step of its forward, per bench ttft arm.

bench ttft's prompt (SmolLM2, system + 8 QMSum transcript chunks + question, 1 torch thread) and
arms in one process, in the order given (the arms before a request decide which pages the
allocator hands it): ``plain`` (every token computed, the model's own attention), ``disk`` (a
fresh handle, K/V from the store), ``ram`` (a handle with a RAM tier, its second request: the
first fills the tier), ``ram_off`` (the same with ``ram_join_buffers=False``) and ``ceiling``
(``generate`` over a deep copy, made untimed, of a cache already in memory). Each request's
faults (``getrusage``) are split by where they happen, with forward hooks on each decoder
layer's attention module and MLP and a wrapper on the ``percache_attention`` hook (no model
code is patched):

- ``to attention``: from the attention module's start to the attention call: the projections,
  RoPE and the cache update, i.e. the first forward's join of the cached prefix with the new
  tokens (the projections and RoPE of 19 tokens are small);
- ``attention``: the attention call; ``o_proj``: the rest of the attention module;
- ``mlp``; ``other``: the rest of the request (tokenizing, loading, the LM head, ...).

``plain`` runs the model's own attention, which the hook does not see: its whole attention
module counts as ``o_proj``.

    python benchmarks/ram_tier_faults.py --data ../shared/data/qmsum --order plain,ram,disk,ceiling,ram_off,ram --rounds 2
"""

from __future__ import annotations

import argparse
import copy
import resource
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

import percache_plugin as percache
from percache_plugin.bench.common import transcript_chunks
from percache_plugin.bench.ttft import SYSTEM, fill
from percache_plugin.bundled import load_smollm2

ARMS = ("plain", "disk", "ram", "ram_off", "ceiling")
STEPS = ("to attention", "attention", "o_proj", "mlp", "other")


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Steps:
    """Fault counts per step of the forward (module hooks and an attention hook wrapper)."""

    def __init__(self, model: Any) -> None:
        self.counts = dict.fromkeys(STEPS, 0)
        self._mark = 0
        for layer in model.get_decoder().layers:
            layer.self_attn.register_forward_pre_hook(lambda m, a: self._start())
            layer.self_attn.register_forward_hook(lambda m, a, o: self._add("o_proj"))
            layer.mlp.register_forward_pre_hook(lambda m, a: self._start())
            layer.mlp.register_forward_hook(lambda m, a, o: self._add("mlp"))

    def _start(self) -> None:
        self._mark = faults()

    def _add(self, step: str) -> None:
        now = faults()
        self.counts[step] += now - self._mark
        self._mark = now

    @percache.hookimpl(wrapper=True)
    def percache_attention(self, ctx: Any, module: Any, query: Any, key: Any, value: Any,
                           attention_mask: Any, kwargs: Any) -> Any:
        self._add("to attention")
        out = yield
        self._add("attention")
        return out

    def reset(self) -> None:
        self.counts = dict.fromkeys(STEPS, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="QMSum folder")
    ap.add_argument("--order", default="plain,ram,disk,ceiling,ram_off,ram",
                    help=f"comma-separated arms, from {', '.join(ARMS)}")
    ap.add_argument("--rounds", type=int, default=2, help="times the order is run")
    args = ap.parse_args()
    order = args.order.split(",")
    if not set(order) <= set(ARMS):
        raise SystemExit(f"unknown arms {sorted(set(order) - set(ARMS))}; known: {', '.join(ARMS)}")
    torch.set_num_threads(1)
    chunks, query = transcript_chunks(args.data, 8, 170)
    model, tok = load_smollm2(status=False)
    segments = [SYSTEM, *chunks, query]
    gen = {"max_new_tokens": 1, "do_sample": False}
    steps = Steps(model)
    with tempfile.TemporaryDirectory(prefix="percache-faults-") as store:
        filled = fill(model, tok, store, segments)
        ids, full = filled.ids, filled.full
        print("| arm | faults | " + " | ".join(STEPS) + " |")
        print("|---|---" + "|---" * len(STEPS) + "|")
        for _ in range(args.rounds):
            for arm in order:
                total = run_arm(arm, model, tok, store, segments, ids, full, steps, gen)
                counts = dict(steps.counts)
                counts["other"] = total - sum(counts.values())
                print(f"| {arm} | {total} | " + " | ".join(str(counts[s]) for s in STEPS) + " |", flush=True)


def run_arm(arm: str, model: Any, tok: Any, store: str, segments: list[str], ids: torch.Tensor,
            full: DynamicCache, steps: Steps, gen: dict[str, Any]) -> int:
    """One timed-position request of ``arm``; its faults (``steps`` holds them by step)."""
    ram = {"ram": 1 << 28, "ram_off": 1 << 28}.get(arm, 0)
    with percache.enable(model, tok, store=store, ram_cache_bytes=ram, ram_join_buffers=arm != "ram_off",
                         plugins=[steps]) as h:
        if arm == "ceiling":
            with torch.no_grad():
                model.generate(ids, past_key_values=copy.deepcopy(full), **gen)
                cache = copy.deepcopy(full)
                steps.reset()
                f0 = faults()
                model.generate(ids, past_key_values=cache, **gen)
                return faults() - f0
        if ram:
            h.generate(segments, **gen)  # fills the tier
        steps.reset()
        f0 = faults()
        if arm == "plain":
            with h.disabled():
                h.generate(segments, **gen)
        else:
            g = h.generate(segments, **gen)
            if ram and g.stats.ram_hits != g.stats.nodes_reused:
                raise SystemExit(f"the {arm} arm read nodes from disk: {g.stats}")
        return faults() - f0


if __name__ == "__main__":
    main()
