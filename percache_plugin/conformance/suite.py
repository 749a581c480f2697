"""The registry of checks, running them on one model, and the capability summary."""

from __future__ import annotations

import inspect
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..attention.kinds import UnsupportedModelError, reuse_limitation
from .drafts import check_draft_tree, check_drafted_decoding
from .result import FAIL, NA, CheckResult, Outcome, failed, not_applicable
from .reuse import (
    check_bf16,
    check_exact_reuse,
    check_fp32,
    check_sliding_window,
    check_store_roundtrip,
)
from .shift import check_rope_shift, check_shifted_reuse, check_splice_recompute_all
from .subject import Subject, SuiteOptions, open_handle
from .switch import check_attention_switch, check_disable_restores, check_left_padding

__all__ = [
    "Check",
    "CHECKS",
    "EXACT_CHECKS",
    "SHIFTED_CHECKS",
    "DRAFT_CHECKS",
    "Capability",
    "SuiteReport",
    "get_check",
    "run_check",
    "run_suite",
    "summarize",
]


@dataclass(frozen=True)
class Check:
    """A named check: a plain function of a :class:`Subject` returning an :class:`Outcome`."""

    name: str
    fn: Callable[[Subject], Outcome]

    @property
    def title(self) -> str:
        return (inspect.getdoc(self.fn) or self.name).split("\n\n")[0].replace("\n", " ")


CHECKS: tuple[Check, ...] = (
    Check("attention_switch", check_attention_switch),
    Check("disable_restores", check_disable_restores),
    Check("exact_reuse", check_exact_reuse),
    Check("store_roundtrip", check_store_roundtrip),
    Check("sliding_window", check_sliding_window),
    Check("fp32", check_fp32),
    Check("bf16", check_bf16),
    Check("left_padding", check_left_padding),
    Check("rope_shift", check_rope_shift),
    Check("splice_recompute_all", check_splice_recompute_all),
    Check("shifted_reuse", check_shifted_reuse),
    Check("drafted_decoding", check_drafted_decoding),
    Check("draft_tree", check_draft_tree),
)
"""Every check, in the order the suite runs them."""
EXACT_CHECKS: tuple[str, ...] = tuple(c.name for c in CHECKS[:8])
"""Checks that exact reuse rests on."""
SHIFTED_CHECKS: tuple[str, ...] = tuple(c.name for c in CHECKS[8:11])
"""Checks that shifted (position-independent) reuse rests on."""
DRAFT_CHECKS: tuple[str, ...] = tuple(c.name for c in CHECKS[11:])
"""Checks of drafted decoding (chains, token trees): they count in the suite's result, not in
either reuse capability."""


def get_check(name: str) -> Check:
    for check in CHECKS:
        if check.name == name:
            return check
    raise KeyError(f"no conformance check named {name!r}; known: {[c.name for c in CHECKS]}")


def run_check(check: Check | str, subject: Subject) -> CheckResult:
    """Run one check; an exception inside it is reported as a failure naming it."""
    check = get_check(check) if isinstance(check, str) else check
    t0 = time.perf_counter()
    try:
        outcome = check.fn(subject)
    except Exception as exc:  # a check must report, never crash the suite
        notes = "".join(f"; {n}" for n in getattr(exc, "__notes__", ()))
        outcome = failed(f"raised {type(exc).__name__}: {exc}{notes}",
                         traceback=traceback.format_exc(limit=8))
    return CheckResult(check.name, check.title, outcome, time.perf_counter() - t0)


@dataclass(frozen=True)
class Capability:
    """What the results say about one capability.

    :ivar name: ``"exact_reuse"`` or ``"shifted_reuse"``.
    :ivar status: ``"supported"``, ``"not applicable"`` or ``"failed"``.
    :ivar reason: why not (or how: "through a plain cache").
    """

    name: str
    status: Literal["supported", "not applicable", "failed"]
    reason: str = ""

    def line(self) -> str:
        return f"{self.name}: {self.status}" + (f" ({self.reason})" if self.reason else "")


def _capability(name: str, results: Sequence[CheckResult], group: Iterable[str],
                note: str = "") -> Capability:
    mine = [r for r in results if r.name in set(group)]
    bad = [r for r in mine if r.status == FAIL]
    if bad:
        return Capability(name, "failed", "; ".join(f"{r.name}: {r.outcome.message}" for r in bad))
    if not mine:
        return Capability(name, "not applicable", "not checked")
    if all(r.status == NA for r in mine):
        return Capability(name, "not applicable", mine[-1].outcome.message)
    return Capability(name, "supported", note)


def summarize(results: Sequence[CheckResult]) -> tuple[Capability, ...]:
    """Exact and shifted reuse as the results support them."""
    switch = next((r for r in results if r.name == "attention_switch"), None)
    plain = switch is not None and switch.status == NA
    exact = _capability("exact_reuse", results, EXACT_CHECKS,
                        "through a plain cache, no attention hook" if plain else "")
    shifted = _capability("shifted_reuse", results, SHIFTED_CHECKS)
    return _gated(exact, results, REUSE_GATES), _gated(shifted, results, SHIFT_GATES)


REUSE_GATES: tuple[str, ...] = ("exact_reuse", "store_roundtrip", "fp32", "bf16")
"""The exact-reuse checks that compare a request served from stored K/V with plain generate:
with none of them applicable, exact reuse was not measured, whatever the others say."""
SHIFT_GATES: tuple[str, ...] = ("splice_recompute_all", "shifted_reuse")
"""Likewise for shifted reuse."""


def _gated(cap: Capability, results: Sequence[CheckResult], gates: Sequence[str]) -> Capability:
    """``cap``, or "not applicable" with the last gate's reason where it says "supported" though
    every one of ``gates`` that ran was not applicable."""
    gating = [r for r in results if r.name in gates]
    if cap.status == "supported" and gating and all(r.status == NA for r in gating):
        return Capability(cap.name, "not applicable", gating[-1].outcome.message)
    return cap


@dataclass(frozen=True)
class SuiteReport:
    """Every check's result on one model, and the capability summary."""

    label: str
    results: tuple[CheckResult, ...]
    capabilities: tuple[Capability, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        """True when every applicable check passed."""
        return all(r.ok for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.label,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "capabilities": {c.name: {"status": c.status, "reason": c.reason}
                             for c in self.capabilities},
            "checks": [r.to_json() for r in self.results],
        }


def _refused(subject: Subject) -> str:
    """Why ``enable()`` refuses the model ("" when it accepts it): its probe forward with a
    plain cache found a family whose cache needs layers of its own kind."""
    try:
        with open_handle(subject):
            return ""
    except UnsupportedModelError as exc:
        return str(exc)


def run_suite(model: Any, tokenizer: Any, *, label: str = "model",
              options: SuiteOptions | None = None, checks: Sequence[str] | None = None,
              progress: Callable[[CheckResult], None] | None = None) -> SuiteReport:
    """Run the checks (all by default) on a loaded model and its tokenizer.

    :param model: a transformers causal LM; it is left as it was found.
    :param tokenizer: its real tokenizer.
    :param label: the model's name in reports.
    :param options: thresholds, engine config and plugins (:class:`SuiteOptions`).
    :param checks: names of the checks to run, in suite order; None runs all.
    :param progress: called with each result as soon as it is known.
    """
    subject = Subject(model, tokenizer, label, options or SuiteOptions())
    chosen = CHECKS if checks is None else tuple(get_check(n) for n in checks)
    t0 = time.perf_counter()
    results = []
    limitation = reuse_limitation(model) or _refused(subject)
    for check in chosen:
        result = (CheckResult(check.name, check.title, not_applicable(limitation), 0.0)
                  if limitation else run_check(check, subject))
        results.append(result)
        if progress is not None:
            progress(result)
    return SuiteReport(label, tuple(results), summarize(results), time.perf_counter() - t0)
