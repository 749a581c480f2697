"""What a conformance check returns: a status, the measured figure and why."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

__all__ = ["Status", "PASS", "FAIL", "NA", "Outcome", "CheckResult", "passed", "failed", "not_applicable"]

Status = Literal["pass", "fail", "n/a"]
PASS: Status = "pass"
FAIL: Status = "fail"
NA: Status = "n/a"


@dataclass(frozen=True)
class Outcome:
    """What a check function returns; the suite adds the check's name and its run time.

    :ivar status: ``"pass"``, ``"fail"`` or ``"n/a"`` (not applicable to this model).
    :ivar figure: the measured figure as short text (``"max|dlogits|=3.1e-06"``); empty if none.
    :ivar value: the main measured number (None when nothing was measured).
    :ivar message: why it failed or does not apply; a short note when it passed.
    :ivar details: further figures, JSON-serialisable (per-layer errors, token counts ...).
    """

    status: Status
    figure: str = ""
    value: float | None = None
    message: str = ""
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.status not in get_args(Status):
            raise ValueError(f"status must be one of {get_args(Status)}, got {self.status!r}")
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))


def passed(figure: str, value: float | None = None, message: str = "", **details: Any) -> Outcome:
    return Outcome(PASS, figure, value, message, details)


def failed(message: str, figure: str = "", value: float | None = None, **details: Any) -> Outcome:
    return Outcome(FAIL, figure, value, message, details)


def not_applicable(reason: str, **details: Any) -> Outcome:
    return Outcome(NA, "", None, reason, details)


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome on one model.

    :ivar name: the check's name (``"exact_reuse"``).
    :ivar title: one line saying what it checks.
    :ivar outcome: status, figure, message and details.
    :ivar seconds: how long it ran.
    """

    name: str
    title: str
    outcome: Outcome
    seconds: float

    @property
    def status(self) -> Status:
        return self.outcome.status

    @property
    def ok(self) -> bool:
        """True unless the check failed (not applicable counts as ok)."""
        return self.outcome.status != FAIL

    def to_json(self) -> dict[str, Any]:
        o = self.outcome
        value = o.value if o.value is None or math.isfinite(o.value) else str(o.value)
        return {
            "name": self.name,
            "title": self.title,
            "status": o.status,
            "figure": o.figure,
            "value": value,
            "message": o.message,
            "details": _jsonable(o.details),
            "seconds": round(self.seconds, 3),
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
