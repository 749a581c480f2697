"""The cost of a forward that verifies ``k`` draft tokens, against a one-token forward, with
SmolLM2-135M over a realistic cache (QMSum text, ``--cached`` tokens): what draft lengths can pay.

A forward feeds the pending token plus ``k`` draft tokens (``k = 0`` is plain decoding), keeps
``k + 1`` logits (``logits_to_keep``, as the drafted decoding loop does), and the cache is cropped
back afterwards. The values of ``k`` are interleaved in every repeat; medians
(``percache_plugin.decode.calibrate.time_forwards``, which ``pc.measure_verify_cost()`` runs too,
over the handle's own set-up and a cache of random tokens).

Three set-ups, interleaved too (``--setups`` picks): ``model`` (the model's own attention and
linear kernels, percache off), ``gqa`` (percache enabled: its sdpa keeps grouped key/value heads
ungrouped, ``attention/gqa.py``) and ``packed`` (that, and the linear layers over oneDNN-packed
weights, ``decode/packed.py``, for ``k >= 1``: what drafted decoding runs with by default; its
``k = 0`` forward is the model's kernels, as in the loop; 2-3 input rows padded to 4 and the
attention's query groups folded, ``decode/folded.py``). ``unpadded`` is ``packed`` without the
padding and the folding (before they were added), ``nofold`` without the folding only. ``tree`` is ``packed`` feeding the
``k`` draft tokens as a token tree (``decode/tree.py``: two branches below the pending token,
an explicit 4D mask and depth positions) instead of one chain: what a tree forward costs.

    python benchmarks/verify_cost.py [--cached 1500] [--max-k 16] [--repeats 15] [--threads 1]

Prints a table and, with ``--json``, writes the per-k medians (``percache_plugin.decode.cost``
reads such a curve as a :class:`~percache_plugin.decode.cost.VerifyCost`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

import percache_plugin as percache
from percache_plugin.bench.common import DEFAULT_QMSUM
from percache_plugin.bundled import load_smollm2
from percache_plugin.decode import PackedLinears
from percache_plugin.decode.calibrate import time_forwards
from percache_plugin.decode.tree import TokenTree, tree_mask, tree_positions
from percache_plugin.rag.qmsum import iter_meetings, meeting_text


def _tree_inputs(k: int, past: int) -> dict[str, Any]:
    """Mask and positions feeding ``k`` draft tokens as two branches below the pending token."""
    half = (k + 1) // 2
    parents = [-1 if i in (0, half) else i - 1 for i in range(k)]
    depths = [i + 1 if i < half else i - half + 1 for i in range(k)]
    tree = TokenTree(tokens=[0] * k, parents=parents, depths=depths)
    return {"attention_mask": tree_mask(tree, past, torch.float32, torch.device("cpu")),
            "position_ids": tree_positions(tree, torch.tensor([[past]]))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM)
    p.add_argument("--cached", type=int, default=1500, help="tokens in the cache")
    p.add_argument("--max-k", type=int, default=16)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--setups", default="model,gqa,packed", help="comma-separated: model, gqa, packed, unpadded, nofold, tree")
    args = p.parse_args()
    setups = args.setups.split(",")
    if not setups or set(setups) - {"model", "gqa", "packed", "unpadded", "nofold", "tree"}:
        p.error(f"--setups: model, gqa, packed, unpadded, nofold and/or tree, got {args.setups!r}")
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    pc = percache.enable(model, tok)
    packed = PackedLinears(model)
    unpadded = PackedLinears(model)
    unpadded.min_rows, unpadded.fold_attention = 1, False
    nofold = PackedLinears(model)
    nofold.fold_attention = False
    contexts: dict[str, Callable[[], Any]] = {
        "model": pc.disabled, "gqa": contextlib.nullcontext, "packed": packed.active,
        "unpadded": unpadded.active, "nofold": nofold.active, "tree": packed.active}
    text = meeting_text(next(iter(iter_meetings(args.data))))
    ids = tok(text, add_special_tokens=False)["input_ids"][:args.cached + args.max_k + 1]
    cache = DynamicCache()
    ks = list(range(args.max_k + 1))
    routes = {s: (lambda k, s=s: contexts["gqa" if s in ("packed", "unpadded", "nofold", "tree") and k == 0 else s]())
              for s in setups}
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids[:args.cached]]), past_key_values=cache, use_cache=True)
        times = time_forwards(model, cache, ids, args.cached, ks, routes, args.repeats,
                              inputs=lambda s, k: _tree_inputs(k, args.cached) if s == "tree" and k >= 2 else {})
    pc.close()
    base = {s: statistics.median(times[s, 0]) for s in setups}
    print(f"SmolLM2-135M, {args.cached} cached tokens, {args.threads} thread(s), {args.repeats} repeats; "
          "median ms (ratio to the set-up's one-token forward)")
    print("| k (draft tokens) | " + " | ".join(setups) + " |")
    print("|---|" + "---|" * len(setups))
    rows: dict[str, dict[int, float]] = {s: {} for s in setups}
    for k in ks:
        cells = []
        for setup in setups:
            med = statistics.median(times[setup, k])
            rows[setup][k] = med / base[setup]
            cells.append(f"{med * 1e3:.1f} ({med / base[setup]:.2f})")
        print(f"| {k} | " + " | ".join(cells) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps({"cached": args.cached, "threads": args.threads,
                                         "one_token_ms": {s: base[s] * 1e3 for s in setups},
                                         "ratio": rows}, indent=1))

if __name__ == "__main__":
    main()
