"""The e2e plots: plain log-axis labels, empty panels explained, the default tau marked."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402

from percache_plugin.bench import plots  # noqa: E402


def test_log_axis_reads_plain_numbers() -> None:
    ax = Figure().add_subplot(1, 1, 1)
    ax.set_yscale("log")
    plots.plain_log_axis(ax.yaxis)
    assert ax.yaxis.get_minor_formatter()(3.0, 0) == "3"
    assert ax.yaxis.get_minor_formatter()(6.0, 0) == ""  # not "6x10^0"; unlabelled, no crowding
    assert ax.yaxis.get_major_formatter()(0.1, 0) == "0.1"


def test_every_plot_draws(tmp_path: Path) -> None:
    series = {"naive": [(5.0, 2.0, False), (6.0, 2.5, False)], "percache": [(0.05, 0.05, True), (4.0, 1.0, False)]}
    assert plots.per_query_latency(series, "u1", tmp_path / "a.png").stat().st_size > 0
    zero = {"qa_hit_rate": 0.0, "kv_hit_ratio": 0.4}
    assert plots.hit_rates([("percache", zero, zero)], tmp_path / "b.png").stat().st_size > 0
    pts = [{"tau": t, "latency_mean_s": 1.0, "rouge_l_ref": 0.2, "rouge_l_naive": 0.9, "qa_hit_rate": 0.1}
           for t in (0.6, 0.74, 0.9)]
    path = plots.tau_sweep(pts, tmp_path / "c.png", method="percache", user="u1", cutoff=0.85,
                           default_tau=0.74)
    assert path.stat().st_size > 0


def test_reworded_questions_are_labelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a paraphrase stream the tick of a rewording names the question it rewords."""
    seen: list[list[str]] = []
    real = plots._save

    def keep(fig: Figure, path: Path) -> Path:
        seen.extend([t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes)
        return real(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    series = {"naive": [(5.0, 2.0, False), (6.0, 2.5, False), (5.5, 2.0, False)]}
    plots.per_query_latency(series, "u1", tmp_path / "a.png", repeats={2: 0})
    assert seen and all(labels == ["1", "2", "3\n(=1)"] for labels in seen)
