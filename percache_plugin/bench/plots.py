"""PNG plots of ``percache bench e2e`` (matplotlib's object API: no pyplot, no global state).

Every function takes plain data (the results JSON's shapes) and writes one file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

__all__ = ["per_query_latency", "mean_latency", "hit_rates", "tau_sweep", "plain_log_axis"]

_MARKERS = "osD^v<>pPhX*"


def _minor_label(v: float, _pos: int | None = None) -> str:
    leading = f"{v:e}"[0]  # the mantissa's first digit: label 2, 3 and 5 only, so labels never crowd
    return f"{v:g}" if leading in "235" else ""


def plain_log_axis(axis: Axis) -> None:
    """Tick labels of a log axis as plain numbers (0.5, 2, 3), not ``6x10^0``."""
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(_minor_label))


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def per_query_latency(series: Mapping[str, Sequence[tuple[float, float, bool]]], user: str,
                      path: Path, *, repeats: Mapping[int, int] | None = None) -> Path:
    """Latency and time to first token of each question in order, one line per method (the
    paper's Fig. 11 shape).

    :param series: method label -> ``[(latency_s, ttft_s, served_from_qa_bank), ...]`` in
        question order.
    :param repeats: 0-based question index -> index of the earlier question it rewords; those
        ticks read ``5\n(=2)`` (1-based).
    """
    fig = Figure(figsize=(13, 4.5))
    axes = [fig.add_subplot(1, 2, k + 1) for k in range(2)]
    any_hit = any(p[2] for points in series.values() for p in points)
    for k, (ax, name) in enumerate(zip(axes, ("latency", "time to first token"), strict=True)):
        for i, (label, points) in enumerate(series.items()):
            xs = list(range(1, len(points) + 1))
            ys = [p[k] for p in points]
            ax.plot(xs, ys, marker=_MARKERS[i % len(_MARKERS)], label=label, linewidth=1.2)
            hits = [(x, y) for x, y, p in zip(xs, ys, points, strict=True) if p[2]]
            if hits:
                hx, hy = zip(*hits, strict=True)
                ax.scatter(hx, hy, s=140, facecolors="none",
                           edgecolors="black", linewidths=1.0, zorder=5)
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        ax.set_xlabel("question (in the order asked)" + ("; (=k): rewords question k" if repeats else ""))
        ax.set_ylabel(f"{name} (s, log scale)")
        if repeats:
            n = max((len(points) for points in series.values()), default=0)
            ax.set_xticks(range(1, n + 1), [f"{x}\n(={repeats[x - 1] + 1})" if x - 1 in repeats
                                            else str(x) for x in range(1, n + 1)])
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, which="both", alpha=0.3)
    if series:
        axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    note = "circled: answered from the QA bank" if any_hit else "no answer came from the QA bank"
    fig.suptitle(f"Per-question latency, user {user} ({note})", fontsize=11)
    return _save(fig, path)


_MEAN_METRICS = (
    ("latency_mean_s", "mean latency (s)"),
    ("ttft_mean_s", "mean time to first token (s)"),
    ("fg_tokens_per_query", "foreground tokens per question\n(prefill + decode, deterministic)"),
)


def mean_latency(table: Mapping[str, Mapping[str, Mapping[str, float | None]]],
                 path: Path, *, title: str = "") -> Path:
    """Mean latency, time to first token and foreground tokens per method, grouped by user,
    plus all users pooled (Fig. 14 shape).

    :param table: group (user id or ``"all"``) -> method label -> summary with the keys of
        ``_MEAN_METRICS``.
    """
    groups = list(table)
    labels = list(dict.fromkeys(lab for g in groups for lab in table[g]))
    fig = Figure(figsize=(max(10, 1.6 * len(groups) + 3), 10))
    width = 0.8 / max(1, len(labels))
    axes = [fig.add_subplot(len(_MEAN_METRICS), 1, k + 1) for k in range(len(_MEAN_METRICS))]
    for ax, (key, ylabel) in zip(axes, _MEAN_METRICS, strict=True):
        for j, label in enumerate(labels):
            xs = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(groups))]
            ys = [table[g].get(label, {}).get(key) for g in groups]
            ax.bar(xs, [y if y is not None and math.isfinite(y) else 0.0 for y in ys], width,
                   label=label, color=f"C{j % 10}")
        ax.set_xticks(range(len(groups)), groups)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    if labels:
        axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[0].set_title("Average per method and user" + (f" ({title})" if title else ""))
    return _save(fig, path)


def hit_rates(pairs: Sequence[tuple[str, Mapping[str, float] | None, Mapping[str, float] | None]],
              path: Path, *, title: str = "") -> Path:
    """QA-bank hit rate and K/V token hit ratio without and with prediction (Fig. 16b shape).

    :param pairs: ``(label, without, with)``; each side maps ``qa_hit_rate`` and
        ``kv_hit_ratio`` to a value in [0, 1], or is None when that method did not run
        (drawn as "n/a").
    """
    fig = Figure(figsize=(max(8, 2.2 * len(pairs) + 2), 4))
    metrics = (("qa_hit_rate", "QA-bank hit rate"), ("kv_hit_ratio", "K/V token hit ratio"))
    for k, (key, metric) in enumerate(metrics):
        ax = fig.add_subplot(1, 2, k + 1)
        xs = list(range(len(pairs)))
        for j, (side, name) in enumerate(((1, "without prediction"), (2, "with prediction"))):
            bx = [x + (j - 0.5) * 0.38 for x in xs]
            values = [p[side] for p in pairs]
            ys = [float(v.get(key) or 0.0) if isinstance(v, Mapping) else 0.0 for v in values]
            ax.bar(bx, ys, 0.38, label=name, color=f"C{j}")
            for x, y, v in zip(bx, ys, values, strict=True):
                ax.text(x, y + 0.01, "n/a" if v is None else f"{y:.0%}", ha="center",
                        va="bottom", fontsize=7)
        ax.set_xticks(xs, [p[0] for p in pairs], fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(metric + (f" ({title})" if title else ""))
        ran = [float(v.get(key) or 0.0) for p in pairs for v in (p[1], p[2]) if v is not None]
        if ran and not any(ran):  # an empty-looking panel says why
            ax.text(0.5, 0.5, "0% for every method in this run", transform=ax.transAxes,
                    ha="center", va="center", fontsize=10, color="dimgrey")
        ax.grid(True, axis="y", alpha=0.3)
        if k == 0:
            ax.legend(fontsize=8)
    return _save(fig, path)


def tau_sweep(points: Sequence[Mapping[str, float | None]], path: Path, *, method: str,
              user: str, cutoff: float | None = None, default_tau: float | None = None) -> Path:
    """Latency, ROUGE-L and QA-bank hit rate against the similarity threshold (Fig. 19 shape).

    :param points: dicts with ``tau``, ``latency_mean_s``, ``rouge_l_ref``, ``rouge_l_naive``
        (may be None) and ``qa_hit_rate``, sorted by ``tau``.
    :param cutoff: the scheduler's population cutoff, drawn as a dashed line (above it,
        predictions are only prefilled).
    :param default_tau: the default threshold, drawn as a dotted line.
    """
    taus = [float(p["tau"] or 0.0) for p in points]
    fig = Figure(figsize=(11, 3.6))
    panels = (
        ("mean latency (s)", (("latency_mean_s", "latency"),)),
        ("ROUGE-L", (("rouge_l_ref", "vs reference"), ("rouge_l_naive", "vs naive answer"))),
        ("QA-bank hit rate", (("qa_hit_rate", "hit rate"),)),
    )
    for k, (ylabel, curves) in enumerate(panels):
        ax = fig.add_subplot(1, 3, k + 1)
        for key, name in curves:
            xy = [(t, float(y)) for t, y in zip(taus, (p.get(key) for p in points), strict=True)
                  if y is not None and math.isfinite(y)]
            if xy:
                ax.plot(*zip(*xy, strict=True), marker="o", label=name)
        if cutoff is not None:
            ax.axvline(cutoff, color="grey", linestyle="--", linewidth=1,
                       label="population cutoff")
        if default_tau is not None:
            ax.axvline(default_tau, color="C3", linestyle=":", linewidth=1.5,
                       label=f"default tau {default_tau:g}")
        if k > 0:
            ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("similarity threshold tau")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(curves) > 1 or ((cutoff is not None or default_tau is not None) and k == 0):
            ax.legend(fontsize=8)
    fig.suptitle(f"Threshold sweep: {method}, user {user}")
    return _save(fig, path)
