"""Families whose attention is not interface-based: exact reuse holds, shifted reuse is n/a."""

from __future__ import annotations

from typing import Any

import pytest

from percache_plugin.conformance import NA, PASS, byte_tokenizer, run_suite
from tests.conformance.helpers import by_name, from_config

LEGACY: dict[str, dict[str, Any]] = {
    "falcon": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
    "gptj": {"n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8, "n_positions": 1024,
             "bos_token_id": 0, "eos_token_id": 1},
}


@pytest.mark.parametrize("model_type", sorted(LEGACY))
def test_exact_supported_through_plain_cache_shifted_not_applicable(model_type: str) -> None:
    report = run_suite(from_config(model_type, **LEGACY[model_type]), byte_tokenizer(),
                       label=model_type)
    assert report.ok, [(r.name, r.outcome.message) for r in report.results if not r.ok]
    results = by_name(report)
    assert results["attention_switch"].status == NA
    assert "AttentionInterface" in results["attention_switch"].outcome.message
    for name in ("exact_reuse", "store_roundtrip", "disable_restores", "left_padding"):
        assert results[name].status == PASS, name
    for name in ("splice_recompute_all", "shifted_reuse"):
        assert results[name].status == NA
        assert "attention hook" in results[name].outcome.message
    caps = {c.name: c for c in report.capabilities}
    assert caps["exact_reuse"].status == "supported"
    assert "plain cache" in caps["exact_reuse"].reason
    assert caps["shifted_reuse"].status == "not applicable"
    assert "attention hook" in caps["shifted_reuse"].reason
