"""The summary of ``percache bench chat``: one table row per method and the issue's targets."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .chat_methods import TurnRow

__all__ = ["summary"]


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):.4f}" if values else "-"


def summary(results: Mapping[str, Sequence[TurnRow]], budget: int, restart_at: int) -> dict[str, Any]:
    """The table (last-turn TTFT, computed tokens, max resident K/V, evictions, KL, top-1) and
    one line per target."""
    table = []
    for m, rows in results.items():
        q = [r for r in rows if r.kl is not None]
        end = rows[-1]
        table.append([m, f"{end.ttft_s:.3f}" if end.ttft_s is not None else "-", end.computed,
                      f"{max(r.kv_bytes for r in rows) / 2**20:.1f}", sum(r.evicted for r in rows),
                      _mean([r.kl for r in q if r.kl is not None]),
                      f"{sum(bool(r.top1) for r in q) / len(q):.2f}" if q else "-"])
    targets = []
    last: dict[str, float] = {m: rows[-1].ttft_s for m, rows in results.items()
                              if rows and m != "restart" and rows[-1].ttft_s}
    if "exact" in last and "reprefill" in last:
        targets.append(f"last-turn TTFT reprefill/exact = {last['reprefill'] / last['exact']:.1f}x (target >= 10x)")
    if "exact" in last and "carried" in last:
        ratios = [e.ttft_s / c.ttft_s for e, c in zip(results["exact"], results["carried"], strict=True)
                  if e.ttft_s is not None and c.ttft_s][-10:]
        targets.append(f"last-turn TTFT exact/carried = {last['exact'] / last['carried']:.2f}x, median over "
                       f"the last {len(ratios)} turns {statistics.median(ratios):.2f}x (target <= 1.25x)")
    if "exact" in results and "carried" in results:
        first = results["carried"][0]
        per_token = first.kv_bytes / max(1, first.prompt_tokens - 1)
        head = results["exact"][0].prompt_tokens  # the head and the first user turn
        bound = (budget + head) * per_token
        worst = max(r.kv_bytes for r in results["exact"])
        targets.append(f"exact: max resident K/V {worst / 2**20:.1f} MiB <= (budget + head + one turn) "
                       f"{bound / 2**20:.1f} MiB: {worst <= bound}; carried grows to "
                       f"{results['carried'][-1].kv_bytes / 2**20:.1f} MiB")
    if results.get("restart") and "exact" in results:
        r = results["restart"][0]
        e = results["exact"][restart_at - 1]
        if r.ttft_s and e.ttft_s:
            targets.append(f"first turn after restart (turn {restart_at}): {r.ttft_s:.3f}s vs {e.ttft_s:.3f}s "
                           f"without = {r.ttft_s / e.ttft_s:.2f}x (target <= 2x); history recomputed "
                           f"{r.recomputed}, restored from {r.note or '-'}")
    return {"table": table, "targets": targets}
