"""The conformance suite: is percache correct on this model, and which capabilities hold?

Each check is a plain function of a loaded model and its real tokenizer that returns a status
(pass, fail, not applicable with a reason) and its measured figure. Two front ends use them:
``percache conformance MODEL`` (:mod:`.cli`) and ``pytest conformance --model PATH``.

    from percache_plugin.conformance import run_suite, format_report
    report = run_suite(model, tokenizer, label="my-model")
    print(format_report(report)); assert report.ok
"""

from .gate import shift_limitation, suite_profile
from .load import BUILTIN_MODELS, load_model
from .report import format_capability_table, format_report, progress_line, write_json
from .result import FAIL, NA, PASS, CheckResult, Outcome, Status
from .subject import Subject, SuiteOptions
from .suite import (
    CHECKS,
    Capability,
    Check,
    SuiteReport,
    get_check,
    run_check,
    run_suite,
    summarize,
)
from .tiny import TINY_FAMILIES, TINY_MIN_AGREEMENT, byte_tokenizer, tiny_model

__all__ = [
    "BUILTIN_MODELS",
    "CHECKS",
    "FAIL",
    "NA",
    "PASS",
    "TINY_FAMILIES",
    "TINY_MIN_AGREEMENT",
    "Capability",
    "Check",
    "CheckResult",
    "Outcome",
    "Status",
    "Subject",
    "SuiteOptions",
    "SuiteReport",
    "byte_tokenizer",
    "format_capability_table",
    "format_report",
    "get_check",
    "load_model",
    "progress_line",
    "run_check",
    "run_suite",
    "shift_limitation",
    "suite_profile",
    "summarize",
    "tiny_model",
    "write_json",
]
