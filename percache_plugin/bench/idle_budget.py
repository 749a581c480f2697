"""``percache bench idle`` part 3: how far ``idle(budget_s=X)`` runs past ``X``.

Each run takes a fresh store, adds the meeting (so the first idle phase predicts questions
about every chunk and summarizes them, all prefilled from scratch) and calls
``idle(budget_s=X)`` for budgets spread so that the budget ends at different points of the
work, interleaving background prefill in ``Config.background_prefill_chunk``-token chunks
with prefill in one forward (the behaviour before chunking). The overrun should stay within
one chunk or one decode step, whichever is longer.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from typing import Any

import torch

from ..config import Config
from ..handle import enable
from ..hooks.specs import hookimpl
from .common import NO_CALIBRATION, markdown_table, median

__all__ = ["ONE_FORWARD", "budget_overrun", "budget_table"]

ONE_FORWARD = 1_000_000
"""A chunk size longer than any prompt: background prefill in one forward."""


class _LastForward:
    """The query length of the model's latest attention call (1: a decode step)."""

    def __init__(self) -> None:
        self.length = 0

    @hookimpl(wrapper=True)
    def percache_attention(self, ctx: Any, module: Any, query: torch.Tensor, key: Any, value: Any,
                           attention_mask: Any, kwargs: Any) -> Any:
        self.length = int(query.shape[2])
        return (yield)


def _step_costs(model: Any, tok: Any, text: str, chunk: int) -> tuple[float, float]:
    """Seconds of one ``chunk``-token prefill forward and of one decode step (medians of 3)."""
    with tempfile.TemporaryDirectory(prefix="percache-bench-idle-") as store:
        pc = enable(model, tok, store=store, predict="off", embedder="hash", drafting=False)
        prefill, decode = [], []
        for i in range(3):
            g = pc.generate(["You are a helpful assistant.", f"{i} {text[:chunk * 3]}",
                             "Summarize."], max_new_tokens=9, do_sample=False)
            decode.append((g.stats.total_s - g.stats.ttft_s) / max(1, g.stats.new_tokens - 1))
            ids = torch.tensor([tok(text[i * 50:], add_special_tokens=False)["input_ids"][:chunk]])
            t0 = time.perf_counter()
            with torch.inference_mode():
                model(input_ids=ids)
            prefill.append(time.perf_counter() - t0)
        pc.disable()
    return median(prefill), median(decode)


def _one_run(model: Any, tok: Any, text: str, budget: float, chunk: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="percache-bench-idle-") as store:
        pc = enable(model, tok, store=store, embedder="hash", background_prefill_chunk=chunk,
                    **NO_CALIBRATION)
        last = _LastForward()
        pc.plugins.register(last)
        pc.add_documents(text, scope="m")
        report = pc.idle(budget_s=budget)
        pc.disable()
    return {"budget_s": budget, "chunk": chunk, "seconds": report.seconds,
            "overrun_s": report.seconds - budget, "stopped_by": report.stopped_by,
            "tasks_run": report.tasks_run, "stopped_in": "decode" if last.length == 1 else "prefill"}


def budget_overrun(model: Any, tok: Any, text: str, budgets: Sequence[float],
                   progress: Any = None) -> dict[str, Any]:
    """Overruns of ``idle(budget_s=...)`` with chunked and one-forward background prefill,
    the runs interleaved (chunked, one forward, next budget, ...)."""
    chunk = Config().background_prefill_chunk
    runs = []
    for budget in budgets:
        for size in (chunk, ONE_FORWARD):
            runs.append(_one_run(model, tok, text, budget, size))
            if progress is not None:
                progress.update(1)
    chunk_s, step_s = _step_costs(model, tok, text, chunk)
    sides = {}
    for size, name in ((chunk, "chunked"), (ONE_FORWARD, "one_forward")):
        mine = [r["overrun_s"] for r in runs if r["chunk"] == size]
        sides[name] = {"median_overrun_s": median(mine), "max_overrun_s": max(mine)}
    bound = max(chunk_s, step_s)
    return {"chunk": chunk, "chunk_forward_s": chunk_s, "decode_step_s": step_s, "bound_s": bound,
            "chunked_within_bound": sides["chunked"]["max_overrun_s"] <= bound + 0.05,
            "sides": sides, "runs": runs}


def budget_table(result: dict[str, Any]) -> str:
    """The runs side by side, one row per budget, and the bound."""
    rows = []
    by_budget: dict[float, dict[int, dict[str, Any]]] = {}
    for r in result["runs"]:
        by_budget.setdefault(r["budget_s"], {})[r["chunk"]] = r
    for budget, pair in by_budget.items():
        c, o = pair[result["chunk"]], pair[ONE_FORWARD]
        rows.append([f"{budget:.1f} s", f"{c['overrun_s'] * 1000:.0f} ms ({c['stopped_in']})",
                     f"{o['overrun_s'] * 1000:.0f} ms ({o['stopped_in']})"])
    s = result["sides"]
    rows.append(["**median / max**",
                 f"{s['chunked']['median_overrun_s'] * 1000:.0f} / {s['chunked']['max_overrun_s'] * 1000:.0f} ms",
                 f"{s['one_forward']['median_overrun_s'] * 1000:.0f} / {s['one_forward']['max_overrun_s'] * 1000:.0f} ms"])
    head = ["idle budget", f"overrun, prefill in {result['chunk']}-token chunks", "overrun, prefill in one forward"]
    note = (f"one {result['chunk']}-token forward {result['chunk_forward_s'] * 1000:.0f} ms, one decode step "
            f"{result['decode_step_s'] * 1000:.0f} ms: bound {result['bound_s'] * 1000:.0f} ms (+50 ms); "
            f"chunked within it: {result['chunked_within_bound']}")
    return markdown_table(head, rows) + "\n" + note
