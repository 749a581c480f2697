"""The suite can fail: planted breakage is reported as a failure with a useful message."""

from __future__ import annotations

from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.conformance import (
    FAIL,
    PASS,
    SuiteOptions,
    byte_tokenizer,
    run_suite,
    tiny_model,
)
from tests.conformance.helpers import by_name, install_entry_point
from tests.conformance.plugins import FlipStoredTensor, WrongLayout, WrongRotaryDims

SHIFT_CHECKS = ["rope_shift", "splice_recompute_all", "shifted_reuse"]
REUSE_CHECKS = ["exact_reuse", "store_roundtrip"]

BROKEN_PROFILE_MODULE = '''
from percache_plugin import hookimpl
from percache_plugin.attention.profile import ModelProfile


@hookimpl
def percache_model_profile(model):
    return ModelProfile(model.config.model_type, "rope", rotary_dims=8)
'''


def test_wrong_rotary_dims_fail_naming_them() -> None:
    # Tiny Llama heads have 16 dims, all rotated; the plugin claims 8.
    report = run_suite(tiny_model("llama"), byte_tokenizer(), checks=SHIFT_CHECKS,
                       options=SuiteOptions(plugins=(WrongRotaryDims(8),)))
    for result in report.results:
        assert result.status == FAIL, result.name
        assert "rotary dims" in result.outcome.message, result.outcome.message
        assert "profile" in result.outcome.message
    assert not report.ok
    caps = {c.name: c for c in report.capabilities}
    assert caps["shifted_reuse"].status == "failed"


def test_wrong_layout_fails_with_the_measured_error() -> None:
    report = run_suite(tiny_model("qwen2"), byte_tokenizer(), checks=["rope_shift"],
                       options=SuiteOptions(plugins=(WrongLayout(),)))
    result = by_name(report)["rope_shift"]
    assert result.status == FAIL
    assert result.outcome.value is not None and result.outcome.value > 1e-2
    assert "layout ('interleaved')" in result.outcome.message
    assert len(result.outcome.details["per_layer"]) == 3


def test_broken_profile_from_an_entry_point_reaches_engine_and_suite(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_entry_point(tmp_path, monkeypatch, "broken_profile_plugin", BROKEN_PROFILE_MODULE)
    model, tok = tiny_model("llama"), byte_tokenizer()
    pc = percache.enable(model, tok)
    assert not pc.capabilities.shifted_reuse
    assert "rotary dims" in pc.capabilities.reasons["shifted_reuse"]
    pc.disable()
    report = run_suite(model, tok, checks=SHIFT_CHECKS)
    for result in report.results:
        assert result.status == FAIL, result.name
        assert "rotary dims" in result.outcome.message


def test_flipped_stored_tensor_fails_exact_reuse_naming_the_logits() -> None:
    flip = FlipStoredTensor()
    report = run_suite(tiny_model("llama"), byte_tokenizer(), checks=REUSE_CHECKS,
                       options=SuiteOptions(plugins=(flip,),
                                            engine_config={"verify_checksums": False}))
    assert flip.flipped, "the plugin never saw a stored file"
    for result in report.results:
        assert result.status == FAIL, result.name
        assert "logits differ from the baseline by" in result.outcome.message
        assert result.outcome.value is not None and result.outcome.value > 1e-3
    assert {c.name: c for c in report.capabilities}["exact_reuse"].status == "failed"


def test_checksums_turn_the_flip_into_misses_and_the_suite_notices() -> None:
    report = run_suite(tiny_model("llama"), byte_tokenizer(), checks=["exact_reuse"],
                       options=SuiteOptions(plugins=(FlipStoredTensor(),)))
    result = by_name(report)["exact_reuse"]
    # Every node is detected as corrupt: the answer is right, but nothing was reused.
    assert result.status == FAIL
    assert "reused no tokens" in result.outcome.message
    assert result.outcome.value == 0.0


def test_untouched_model_passes_the_same_checks() -> None:
    report = run_suite(tiny_model("llama"), byte_tokenizer(), checks=[*REUSE_CHECKS, *SHIFT_CHECKS],
                       options=SuiteOptions(engine_config={"verify_checksums": False}))
    assert [r.status for r in report.results] == [PASS] * 5, report.results
