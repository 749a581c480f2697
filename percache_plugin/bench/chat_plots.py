"""PNG plots of ``percache bench chat``: one line per method over the turns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .plots import plain_log_axis

__all__ = ["per_turn"]

_MARKERS = "osD^v<>pPhX*"


def per_turn(results: Mapping[str, Sequence[Any]], field: str, ylabel: str, path: Path, *,
             log: bool = False, scale: float = 1.0) -> Path:
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    for i, (method, rows) in enumerate(results.items()):
        points = [(r.turn, getattr(r, field) * scale) for r in rows if getattr(r, field) is not None]
        ax.plot([x for x, _ in points], [y for _, y in points],
                marker=_MARKERS[i % len(_MARKERS)], markersize=3, linewidth=1, label=method)
    if log:
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
    ax.set_xlabel("turn")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
