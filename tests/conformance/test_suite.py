"""The suite's own machinery: results, the registry, summaries, leaving the model as found."""

from __future__ import annotations

import json

import pytest
import torch

from percache_plugin.conformance import (
    CHECKS,
    FAIL,
    NA,
    PASS,
    Check,
    CheckResult,
    Outcome,
    Subject,
    SuiteOptions,
    byte_tokenizer,
    format_report,
    get_check,
    run_check,
    run_suite,
    summarize,
    tiny_model,
)
from percache_plugin.conformance.suite import DRAFT_CHECKS, EXACT_CHECKS, SHIFTED_CHECKS
from tests.conformance.helpers import by_name


def _result(name: str, status: str, message: str = "") -> CheckResult:
    return CheckResult(name, name, Outcome(status, "", None, message), 0.0)  # type: ignore[arg-type]


def test_every_check_is_documented_and_grouped() -> None:
    names = [c.name for c in CHECKS]
    assert len(set(names)) == len(names) == 13
    assert set(EXACT_CHECKS) | set(SHIFTED_CHECKS) | set(DRAFT_CHECKS) == set(names)
    for check in CHECKS:
        assert check.fn.__doc__ and len(check.title) > 20, check.name
    with pytest.raises(KeyError, match="no conformance check named 'nope'"):
        get_check("nope")


def test_outcome_and_options_validate() -> None:
    with pytest.raises(ValueError, match="status must be one of"):
        Outcome("ok")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_agreement"):
        SuiteOptions(min_agreement=1.5)
    with pytest.raises(ValueError, match="teacher_tokens"):
        SuiteOptions(teacher_tokens=0)


def test_a_raising_check_is_a_failure_not_a_crash() -> None:
    def boom(subject: Subject) -> Outcome:
        """Always raises."""
        raise RuntimeError("kaput")

    subject = Subject(tiny_model("llama"), byte_tokenizer())
    result = run_check(Check("boom", boom), subject)
    assert result.status == FAIL
    assert result.outcome.message == "raised RuntimeError: kaput"
    assert "Traceback" in result.outcome.details["traceback"]
    json.dumps(result.to_json())


def test_suite_leaves_the_model_as_found() -> None:
    model, tok = tiny_model("gemma3"), byte_tokenizer()
    x = torch.tensor([list(range(4, 40))])
    with torch.inference_mode():
        before = model(x).logits
    impl, dtype = model.config._attn_implementation, model.dtype
    report = run_suite(model, tok, checks=["attention_switch", "bf16", "splice_recompute_all"])
    assert report.ok, format_report(report)
    assert model.config._attn_implementation == impl and model.dtype == dtype
    with torch.inference_mode():
        assert torch.equal(model(x).logits, before)
    data = json.loads(json.dumps(report.to_json()))
    assert data["ok"] and [c["status"] for c in data["checks"]] == [PASS] * 3


def test_summary_of_capabilities() -> None:
    plain = [_result("attention_switch", NA, "not interface-based"), _result("exact_reuse", PASS),
             _result("splice_recompute_all", NA, "needs the hook"), _result("rope_shift", PASS),
             _result("shifted_reuse", NA, "needs the hook")]
    exact, shifted = summarize(plain)
    assert (exact.status, exact.reason) == ("supported", "through a plain cache, no attention hook")
    assert (shifted.status, shifted.reason) == ("not applicable", "needs the hook")

    broken = [_result("exact_reuse", FAIL, "logits differ"), _result("rope_shift", FAIL, "rotary dims")]
    exact, shifted = summarize(broken)
    assert exact.status == "failed" and "logits differ" in exact.reason
    assert shifted.status == "failed" and "rotary dims" in shifted.reason


def test_exact_reuse_never_measured_is_not_supported() -> None:
    # Every check comparing a served request with plain generate was not applicable (the model's
    # context is shorter than their prompts): the capability was not measured.
    results = [_result("attention_switch", PASS), _result("disable_restores", PASS),
               *(_result(n, NA, "exceeds the model's context of 128")
                 for n in ("exact_reuse", "store_roundtrip", "fp32", "bf16")),
               _result("left_padding", PASS)]
    exact, _ = summarize(results)
    assert (exact.status, exact.reason) == ("not applicable", "exceeds the model's context of 128")
    report = run_suite(tiny_model("llama", max_position_embeddings=128), byte_tokenizer(),
                       checks=[*EXACT_CHECKS])
    assert by_name(report)["exact_reuse"].status == NA and report.ok
    assert report.capabilities[0].status == "not applicable"


def test_sliding_window_builds_a_prompt_longer_than_the_window() -> None:
    # The default prompt is ~300 byte tokens: a 400-token window forces a longer chunk.
    report = run_suite(tiny_model("mistral", sliding_window=400), byte_tokenizer(),
                       checks=["sliding_window"])
    result = report.results[0]
    assert result.status == PASS, result.outcome.message
    assert result.outcome.details["sliding_window"] == 400
    assert result.outcome.details["prompt_tokens"] > 400


def test_sliding_window_over_budget_is_not_applicable() -> None:
    report = run_suite(tiny_model("mistral", sliding_window=400), byte_tokenizer(),
                       checks=["sliding_window"], options=SuiteOptions(max_window_tokens=256))
    result = report.results[0]
    assert result.status == NA
    assert "longer than the check's prompt budget (256)" in result.outcome.message
