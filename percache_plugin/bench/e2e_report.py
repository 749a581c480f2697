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

__all__ = ["PLOTS", "PER_STREAM", "plot_key", "SUMMARY_HEADER", "DRAFT_HEADER", "summary_row",
           "draft_row", "markdown_report", "clean", "write_plots"]

PLOTS: Mapping[str, str] = {
    "per_query_latency": "fig11_latency_per_query.png",
    "mean_latency": "fig14_mean_latency.png",
    "hit_rates": "fig16b_hit_rates.png",
    "tau_sweep": "fig19_tau_sweep.png",
}
"""Plot files; all but the sweep are drawn per query stream: ``fig11_latency_per_query_
original.png`` under the key ``per_query_latency:original`` (see :func:`plot_key`)."""
PER_STREAM = ("per_query_latency", "mean_latency", "hit_rates")


def plot_key(kind: str, stream: str) -> str:
    """The ``plots`` key of ``kind`` drawn for ``stream``."""
    return f"{kind}:{stream}"


def _plot_file(kind: str, stream: str) -> str:
    stem, ext = PLOTS[kind].rsplit(".", 1)
    return f"{stem}_{stream}.{ext}"


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


DRAFT_HEADER = ["method", "repeats", "QA hit on repeats", "drafted answers", "tokens drafted",
                "accepted", "acceptance", "decode forwards", "fg decode tok", "by source (accepted/drafted)"]


def draft_row(name: str, s: Mapping[str, Any]) -> list[str]:
    """Repeats in the stream and decoding with drafts (zero where a method decodes plainly)."""
    acc = s.get("accepted_by_source") or {}
    sources = ", ".join(f"{k} {acc.get(k, 0)}/{n}" for k, n in (s.get("drafted_by_source") or {}).items())
    return [name, _fmt(s.get("repeat_rate"), ".0%"), _fmt(s.get("qa_hit_rate_repeats"), ".0%"),
            str(s.get("drafted_answers", "-")), str(s.get("tokens_drafted", "-")),
            str(s.get("tokens_accepted", "-")), _fmt(s.get("draft_acceptance"), ".0%"),
            str(s["decode_forwards"]) if s.get("drafted_answers") else "-",  # counted when drafting
            str(s["fg_decode_tokens"]), sources or "-"]


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
    ]
    for stream, summary in payload["summary"].items():
        rates = [u["streams"][stream]["repeat_rate"] for u in payload["users"]
                 if stream in u.get("streams", {})]
        lines += [
            f"## Stream {stream}: all users", "",
            f"Reworded earlier questions: {', '.join(f'{r:.0%}' for r in rates)} of each "
            "user's queries." if rates else "", "",
            markdown_table(SUMMARY_HEADER, [summary_row(s["label"], s) for s in summary.values()]), "",
            markdown_table(DRAFT_HEADER, [draft_row(s["label"], s) for s in summary.values()]), "",
            f"## Stream {stream}: per user", "",
            markdown_table(["user", SUMMARY_HEADER[0], *SUMMARY_HEADER[2:]],
                           [_user_row(r) for r in payload["runs"]
                            if r["status"] == "ok" and r.get("stream", "original") == stream]), "",
        ]
    if payload["tau_sweep"]:
        lines += ["", f"## Threshold sweep ({st['sweep_method']}, user {payload['users'][0]['id']}, "
                      f"stream {payload.get('sweep_stream')})",
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
                summary: Mapping[str, Mapping[str, Mapping[str, Any]]],
                sweep: Sequence[Mapping[str, Any]], sweep_method: str,
                sweep_stream: str | None = None) -> dict[str, str]:
    """Every plot: per stream (``summary`` is stream -> method -> summary), then the sweep."""
    written: dict[str, str] = {}
    for stream, stream_summary in summary.items():
        for kind, name in _stream_plots(out, stream, users, methods,
                                        [r for r in runs if r.stream == stream], stream_summary).items():
            written[plot_key(kind, stream)] = name
    if sweep:
        from . import plots

        cutoff = getattr(Config(), "population_cutoff", None)
        default_tau = next((float(p["tau"]) for p in sweep
                            if str(p.get("note", "")).startswith("main run")),
                           Config().similarity_threshold)
        user = users[0] + (f", {sweep_stream} stream" if sweep_stream else "")
        written["tau_sweep"] = plots.tau_sweep(sweep, out / PLOTS["tau_sweep"],
                                               method=sweep_method, user=user,
                                               cutoff=cutoff, default_tau=default_tau).name
    return written


def _stream_plots(out: Path, stream: str, users: Sequence[str], methods: Sequence[Method],
                  runs: Sequence[RunResult], summary: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    from . import plots  # matplotlib (the "bench" extra) only when plotting

    ok = {(r.user, r.method): r for r in runs if r.status == "ok"}
    label = {m.name: m.label for m in methods}
    written: dict[str, str] = {}
    first = users[0]
    series = {label[m.name]: [(q.latency_s, q.ttft_s, q.source == "qa_bank")
                              for q in ok[first, m.name].queries]
              for m in methods if (first, m.name) in ok}
    if series:
        shown = next(ok[first, m.name] for m in methods if (first, m.name) in ok)
        repeats = {q.index: q.repeat_of for q in shown.queries if q.repeat_of is not None}
        written["per_query_latency"] = plots.per_query_latency(
            series, f"{first}, {stream} stream", out / _plot_file("per_query_latency", stream),
            repeats=repeats).name
    table: dict[str, dict[str, Any]] = {u: {label[m.name]: ok[u, m.name].summary for m in methods if (u, m.name) in ok}
             for u in users}
    table["all"] = {label[m]: s for m, s in summary.items()}
    if table["all"]:
        written["mean_latency"] = plots.mean_latency(
            table, out / _plot_file("mean_latency", stream), title=f"{stream} stream").name
    pairs: list[tuple[str, Any, Any]] = [
        (name, summary.get(a), summary.get(b)) for name, a, b in PREDICTION_PAIRS
        if a in summary or b in summary]
    if not pairs:  # no pair member ran: each method on its own, on its side
        pairs = [(label[m.name], None if m.predicts else summary[m.name],
                  summary[m.name] if m.predicts else None) for m in methods if m.name in summary]
    if pairs:
        written["hit_rates"] = plots.hit_rates(pairs, out / _plot_file("hit_rates", stream),
                                               title=f"{stream} stream").name
    return written
