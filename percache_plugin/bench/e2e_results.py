"""What ``percache bench e2e`` keeps: summaries per stream, results.json with its plots and
results.md, redrawing them (``--replot``) and merging runs made side by side (``--combine``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .e2e_methods import REFERENCE_METHOD, Method, select_methods
from .e2e_replay import Background, QueryRecord, RunResult, summarize
from .e2e_report import clean as _clean
from .e2e_report import markdown_report as _markdown
from .e2e_report import write_plots as _plots
from .metrics import rouge_l

__all__ = ["summaries", "write_results", "replot", "combine"]


def summaries(methods: Sequence[Method], runs: Sequence[RunResult],
              streams: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Stream -> method name -> pooled summary over that stream's users (methods that ran)."""
    out: dict[str, dict[str, Any]] = {}
    for s in streams:
        out[s] = {}
        for m in methods:
            done = [r for r in runs if r.method == m.name and r.stream == s and r.status == "ok"]
            if done:
                out[s][m.name] = {"label": m.label, **summarize(done)}
    return out


def write_results(out: Path, payload: dict[str, Any], runs: Sequence[RunResult]) -> dict[str, Any]:
    """results.json (first, so a plotting error loses no data), the plots, results.md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(payload, indent=2))
    methods = select_methods([m["name"] for m in payload["methods"]])
    payload["plots"] = _plots(out, [u["id"] for u in payload["users"]], methods, runs,
                              payload["summary"], payload["tau_sweep"],
                              payload["settings"]["sweep_method"], payload.get("sweep_stream"))
    (out / "results.json").write_text(json.dumps(payload, indent=2))
    (out / "results.md").write_text(_markdown(payload))
    return payload


def _run_from_dict(d: Mapping[str, Any]) -> RunResult:
    fields = {**d, "queries": [QueryRecord(**q) for q in d["queries"]],
              "background": Background(**d["background"])}
    return RunResult(**fields)


def _score_against_naive(runs: Sequence[RunResult]) -> None:
    """ROUGE-L vs naive for the answers of runs made without the naive run of their user and
    stream (another part ran it), as :func:`~.e2e.run_benchmark` scores them within one run;
    their summaries are recomputed. Answers already scored are left as they are."""
    naive = {(r.user, r.stream): [q.answer for q in r.queries] for r in runs
             if r.method == REFERENCE_METHOD and r.status == "ok"}
    for r in runs:
        ref = naive.get((r.user, r.stream))
        missing = [q for q in r.queries if q.rouge_l_naive is None and q.index < len(ref or ())]
        if ref is None or not missing:
            continue
        for q in missing:
            q.rouge_l_naive = rouge_l(q.answer, ref[q.index])
        if r.status == "ok":
            r.summary = summarize([r])


def replot(out: Path) -> dict[str, Any]:
    """Redraw the plots and results.md from ``out/results.json`` (no model needed)."""
    path = out / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"no results.json in {out} (run the benchmark first)")
    payload = _upgrade(json.loads(path.read_text()))
    return write_results(out, payload, [_run_from_dict(r) for r in payload["runs"]])


def _upgrade(payload: dict[str, Any]) -> dict[str, Any]:
    """A results.json from before query streams: its one stream is ``original``."""
    if "streams" not in payload:
        payload["streams"] = ["original"]
        payload["summary"] = {"original": payload["summary"]}
        payload["sweep_stream"] = "original" if payload.get("tau_sweep") else None
    return payload


def combine(parts: Sequence[Path], out: Path) -> dict[str, Any]:
    """Merge the results of runs of the same benchmark over different users or streams (run
    side by side, say one process per stream) into one ``out/results.json``, results.md and
    plots; summaries are recomputed from the runs. Raises ValueError when the parts differ in
    model or settings that change the figures, or repeat a (user, stream, method)."""
    payloads = [_upgrade(json.loads((p / "results.json").read_text())) for p in parts]
    if not payloads:
        raise ValueError("nothing to combine")
    first = payloads[0]
    keys = ("max_new_tokens", "max_meetings", "queries", "repeat_rate", "seed", "config")
    for p, part in zip(parts[1:], payloads[1:], strict=True):
        differ = [k for k in keys if part["settings"].get(k) != first["settings"].get(k)]
        if part["model"] != first["model"] or differ:
            raise ValueError(f"{p} was run with other settings ({differ or 'model'}): not combined")
    runs = [_run_from_dict(r) for part in payloads for r in part["runs"]]
    seen = [(r.user, r.stream, r.method) for r in runs]
    if len(seen) != len(set(seen)):
        raise ValueError("the parts replay the same (user, stream, method) twice: not combined")
    _score_against_naive(runs)
    streams = list(dict.fromkeys(s for part in payloads for s in part["streams"]))
    users: dict[str, dict[str, Any]] = {}
    for part in payloads:
        for u in part["users"]:
            merged = users.setdefault(u["id"], {**u, "streams": {}})
            merged["streams"].update(u.get("streams", {}))
    methods = select_methods(list(dict.fromkeys(m["name"] for part in payloads
                                                for m in part["methods"])))
    swept = next((part for part in payloads if part["tau_sweep"]), first)
    payload = {
        **first,
        "settings": {**first["settings"], "streams": streams, "out": str(out),
                     "combined_from": [str(p) for p in parts]},
        "methods": [m for m in first["methods"] if m["name"] in {x.name for x in methods}]
        + [m for part in payloads[1:] for m in part["methods"]
           if m["name"] not in {x["name"] for x in first["methods"]}],
        "users": list(users.values()),
        "streams": streams,
        "summary": summaries(methods, runs, streams),
        "runs": [asdict(r) for r in runs],
        "tau_sweep": swept["tau_sweep"],
        "tau_sweep_runs": swept["tau_sweep_runs"],
        "sweep_stream": swept.get("sweep_stream"),
        "plots": {},
        "wall_s": max(part["wall_s"] for part in payloads),
        "parts_wall_s": [part["wall_s"] for part in payloads],
    }
    return write_results(out, _clean(payload), runs)
