"""``percache conformance --all-families``: the builder on a handful of families, and the
committed capability matrix covers every registered family with a status and a reason."""

from __future__ import annotations

import re
from pathlib import Path

from percache_plugin.conformance.families import build_family, registered_families
from percache_plugin.conformance.matrix import FamilyRow, format_matrix, run_matrix

MATRIX = Path(__file__).resolve().parents[2] / "docs" / "capability-matrix.md"


def test_builder_runs_the_suite_on_a_handful_of_families() -> None:
    rows = {r.family: r for r in run_matrix(["llama", "gpt2", "glm4", "mamba"], timeout_s=300)}
    assert (rows["llama"].status, rows["llama"].exact, rows["llama"].shifted) == \
        ("pass", "supported", "supported")
    assert rows["gpt2"].status == "pass" and rows["gpt2"].shifted == "not applicable"
    assert "learned" in rows["gpt2"].reason
    assert rows["glm4"].shifted == "supported"  # interleaved layout found by probing
    assert rows["mamba"].status in ("pass", "skip") and rows["mamba"].reason
    text = format_matrix(list(rows.values()))
    assert "registered causal-LM families: **4**" in text


def test_gpt_neo_is_built_with_one_layer_of_each_attention_kind() -> None:
    # Its attention_types ([[["global", "local"], 12]]) must add up to the layer count: shrunk to
    # 2 layers alone, the config was rejected and the matrix had no GPT-Neo row.
    config = build_family("gpt_neo").config
    assert config.attention_types == [[["global", "local"], 1]]
    assert config.attention_layers == ["global", "local"] and config.num_layers == 2
    assert config.window_size == 16


def test_committed_matrix_covers_every_registered_family() -> None:
    text = MATRIX.read_text(encoding="utf-8")
    table = {m.group(1): m.groups() for m in
             re.finditer(r"^\| (\S+) \| (\w+) \| ([^|]+) \| ([^|]+) \| (.*) \|$", text, re.M)}
    missing = [f for f in registered_families() if f not in table]
    assert not missing, f"families missing from {MATRIX.name}: {missing}"
    for family, status, exact, shifted, reason in table.values():
        if family == "family":
            continue
        assert status in FamilyRow.__annotations__ or status in ("pass", "fail", "skip", "n/a")
        assert status != "timeout", family
        if status != "pass" or "not applicable" in (exact.strip(), shifted.strip()):
            assert reason.strip(), f"{family}: {status} without a reason"
