"""What ``percache bench e2e`` writes: the markdown tables, JSON-safe values and the plots."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config import Config
from .common import markdown_table
from .e2e_methods import (
    PREDICTION_PAIRS,
    Method,
)
from .e2e_replay import RunResult

__all__ = ["PLOTS", "SUMMARY_HEADER", "summary_row", "markdown_report", "clean", "write_plots"]

PLOTS: Mapping[str, str] = {
    "per_query_latency": "fig11_latency_per_query.png",
    "mean_latency": "fig14_mean_latency.png",
    "hit_rates": "fig16b_hit_rates.png",
    "tau_sweep": "fig19_tau_sweep.png",
}


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _fmt(x: Any, spec: str = ".2f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


SUMMARY_HEADER = ["method", "users", "queries", "latency mean s", "p50", "p95", "TTFT mean s", "p50",
           "p95", "QA hit", "K/V hit", "ROUGE-L ref", "ROUGE-L vs naive", "fg prefill tok",
           "fg decode tok", "bg prefill tok", "bg decode tok", "stored"]


def summary_row(name: str, s: Mapping[str, Any]) -> list[str]:
    return [name, str(s["users"]), str(s["queries"]), _fmt(s["latency_mean_s"]),
            _fmt(s["latency_p50_s"]), _fmt(s["latency_p95_s"]), _fmt(s["ttft_mean_s"]),
            _fmt(s["ttft_p50_s"]), _fmt(s["ttft_p95_s"]), _fmt(s["qa_hit_rate"], ".0%"),
            _fmt(s["kv_hit_ratio"], ".0%"), _fmt(s["rouge_l_ref"], ".3f"),
            _fmt(s["rouge_l_naive"], ".3f"), str(s["fg_prefill_tokens"]),
            str(s["fg_decode_tokens"]), str(s["bg_prefill_tokens"]), str(s["bg_decode_tokens"]),
            _bytes(s["stored_bytes"])]


def _user_row(run: Mapping[str, Any]) -> list[str]:
    row = summary_row(run["label"], run["summary"])
    return [run["user"], row[0], *row[2:]]  # the users column is always 1 here


def markdown_report(payload: Mapping[str, Any]) -> str:
    st = payload["settings"]
    lines = [
        "# percache bench e2e", "",
        f"Model: {payload['model']}; embedder: {payload['embedder']}; users: "
        f"{', '.join(u['id'] for u in payload['users'])}; {st['queries']} questions per user; "
        f"max_new_tokens={st['max_new_tokens']}; wall time {payload['wall_s'] / 60:.1f} min.", "",
        "Latency and TTFT in seconds (wall clock, noisy); fg = tokens computed while the user "
        "waited (deterministic cost proxy), bg = idle-time tokens; K/V hit = reused tokens / "
        "prompt tokens of generated answers.", "",
        "## All users", "",
        markdown_table(SUMMARY_HEADER, [summary_row(s["label"], s) for s in payload["summary"].values()]), "",
        "## Per user", "",
        markdown_table(["user", SUMMARY_HEADER[0], *SUMMARY_HEADER[2:]],
                       [_user_row(r) for r in payload["runs"] if r["status"] == "ok"]),
    ]
    if payload["tau_sweep"]:
        lines += ["", f"## Threshold sweep ({st['sweep_method']}, user {payload['users'][0]['id']})",
                  "", markdown_table(
                      ["tau", "latency mean s", "QA hit", "ROUGE-L ref", "ROUGE-L vs naive", "note"],
                      [[_fmt(p["tau"]), _fmt(p["latency_mean_s"]), _fmt(p["qa_hit_rate"], ".0%"),
                        _fmt(p["rouge_l_ref"], ".3f"), _fmt(p["rouge_l_naive"], ".3f"),
                        p.get("note", "")] for p in payload["tau_sweep"]])]
    other = [r for r in payload["runs"] + payload["tau_sweep_runs"] if r["status"] != "ok"]
    if other:
        lines += ["", "## Not run", ""]
        lines += [f"- {r['user']} / {r['method']}: {r['status']}: "
                  f"{r['reason'].splitlines()[0] if r['reason'] else ''}" for r in other]
    if payload["plots"]:
        lines += ["", "## Plots", ""] + [f"![{k}]({v})" for k, v in payload["plots"].items()]
    return "\n".join(lines) + "\n"


def clean(x: Any) -> Any:
    """JSON-safe: NaN and inf become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def write_plots(out: Path, users: Sequence[str], methods: Sequence[Method], runs: Sequence[RunResult],
           summary: Mapping[str, Mapping[str, Any]], sweep: Sequence[Mapping[str, Any]],
           sweep_method: str) -> dict[str, str]:
    from . import plots  # matplotlib (the "bench" extra) only when plotting

    ok = {(r.user, r.method): r for r in runs if r.status == "ok"}
    label = {m.name: m.label for m in methods}
    written: dict[str, str] = {}
    first = users[0]
    series = {label[m.name]: [(q.latency_s, q.ttft_s, q.source == "qa_bank")
                              for q in ok[first, m.name].queries]
              for m in methods if (first, m.name) in ok}
    if series:
        written["per_query_latency"] = plots.per_query_latency(
            series, first, out / PLOTS["per_query_latency"]).name
    table: dict[str, dict[str, Any]] = {u: {label[m.name]: ok[u, m.name].summary for m in methods if (u, m.name) in ok}
             for u in users}
    table["all"] = {label[m]: s for m, s in summary.items()}
    if table["all"]:
        written["mean_latency"] = plots.mean_latency(table, out / PLOTS["mean_latency"]).name
    pairs: list[tuple[str, Any, Any]] = [
        (name, summary.get(a), summary.get(b)) for name, a, b in PREDICTION_PAIRS
        if a in summary or b in summary]
    if not pairs:  # no pair member ran: each method on its own, on its side
        pairs = [(label[m.name], None if m.predicts else summary[m.name],
                  summary[m.name] if m.predicts else None) for m in methods if m.name in summary]
    if pairs:
        written["hit_rates"] = plots.hit_rates(pairs, out / PLOTS["hit_rates"]).name
    if sweep:
        cutoff = getattr(Config(), "population_cutoff", None)
        default_tau = next((float(p["tau"]) for p in sweep
                            if str(p.get("note", "")).startswith("main run")),
                           Config().similarity_threshold)
        written["tau_sweep"] = plots.tau_sweep(sweep, out / PLOTS["tau_sweep"],
                                               method=sweep_method, user=first,
                                               cutoff=cutoff, default_tau=default_tau).name
    return written
