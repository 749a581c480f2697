"""Text output of the suite: one progress line per check, the final table, the capabilities."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .result import PASS, CheckResult
from .suite import SuiteReport

__all__ = ["progress_line", "format_report", "format_capability_table", "write_json"]

_NAME_WIDTH = 22
_STATUS_WIDTH = 6


def progress_line(result: CheckResult, index: int, total: int) -> str:
    """``[ 3/11] exact_reuse  pass  max|dlogits|=0 ... (0.41 s)``."""
    o = result.outcome
    text = o.figure if o.status == PASS or not o.message else o.message
    return (f"[{index:>2}/{total}] {result.name:<{_NAME_WIDTH}} {o.status:<{_STATUS_WIDTH}} "
            f"{text} ({result.seconds:.2f} s)")


def format_report(report: SuiteReport) -> str:
    """The final table (check, status, figure; the reason under a failed or n/a row) and the
    capability summary."""
    lines = [f"percache conformance: {report.label}",
             f"{'check':<{_NAME_WIDTH}} {'status':<{_STATUS_WIDTH}} figure",
             "-" * 78]
    for r in report.results:
        o = r.outcome
        lines.append(f"{r.name:<{_NAME_WIDTH}} {o.status:<{_STATUS_WIDTH}} {o.figure}".rstrip())
        if o.status != PASS and o.message:
            lines.append(f"{'':<{_NAME_WIDTH}} {'':<{_STATUS_WIDTH}} -> {o.message}")
    lines.append("-" * 78)
    lines += [f"capability {c.line()}" for c in report.capabilities]
    failed = [r.name for r in report.results if not r.ok]
    lines.append(f"{'PASS' if report.ok else 'FAIL'}: {len(report.results) - len(failed)}/"
                 f"{len(report.results)} checks ok" + (f", failed: {', '.join(failed)}" if failed else "")
                 + f" ({report.seconds:.1f} s)")
    return "\n".join(lines)


def format_capability_table(reports: Sequence[SuiteReport]) -> str:
    """One row per model: overall status, exact reuse and shifted reuse (with reasons)."""
    width = max([len("model"), *(len(r.label) for r in reports)])
    lines = [f"{'model':<{width}}  result  exact reuse       shifted reuse", "-" * (width + 60)]
    for rep in reports:
        caps = {c.name: c for c in rep.capabilities}
        exact, shifted = caps["exact_reuse"], caps["shifted_reuse"]
        lines.append(f"{rep.label:<{width}}  {'pass' if rep.ok else 'FAIL':<6}  "
                     f"{exact.status:<16}  {shifted.status}"
                     + (f": {shifted.reason}" if shifted.status != "supported" and shifted.reason else ""))
        if exact.reason:
            lines.append(f"{'':<{width}}  {'':<6}  exact: {exact.reason}")
    return "\n".join(lines)


def write_json(reports: Sequence[SuiteReport], path: str | Path) -> None:
    """All results of all models as JSON."""
    data = {"ok": all(r.ok for r in reports), "models": [r.to_json() for r in reports]}
    Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
