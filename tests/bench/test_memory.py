"""``percache bench memory``: the per-category table and the acceptance targets from rows."""

from __future__ import annotations

import pytest

from percache_plugin.bench.memory import METHODS, _table, _targets


def _rows() -> list[dict[str, object]]:
    rows = []
    for method in METHODS:
        tokens = 1000 if method == "full" else 80
        recall = {"raw": 0.5, "facts": 0.25}.get(method, 1.0)
        for cat, unanswerable in ((1, False), (5, method == "facts")):
            rows.append({"method": method, "category": cat, "recall": recall, "prompt_tokens": tokens,
                         "latency_s": 1.0, "f1": 0.5 if cat != 5 else None, "unanswerable": unanswerable})
    return rows


def test_table_and_targets_compare_memory_methods_with_full_context_and_raw_turns() -> None:
    table, summary = _table(_rows())
    assert len(table) == 3 * len(METHODS)  # categories 1, 5 and "all" per method
    assert summary["facts/5"]["unanswerable"] == 1.0 and summary["full/5"]["unanswerable"] == 0.0
    assert summary["facts/all"]["f1"] == 0.5 and summary["facts/5"]["f1"] is None
    t = _targets(summary)
    assert t["token_share"]["facts"] == pytest.approx(0.08) and "full" not in t["token_share"]
    assert t["recall_vs_raw"]["facts"] == pytest.approx(-0.25)
    assert t["recall_vs_raw"]["facts+raw"] == pytest.approx(0.5)
    assert t["unanswerable_vs_full"]["facts"] == 1.0 and t["unanswerable_vs_full"]["raw"] == 0.0
