"""One test per conformance check per model (see conftest.py for the options)."""

from __future__ import annotations

from typing import Any

import pytest

from percache_plugin.conformance import NA, PASS, run_check


def test_check(conformance_case: tuple[str, str], conformance_subjects: Any,
               record_result: Any) -> None:
    name, check = conformance_case
    result = run_check(check, conformance_subjects.get(name))
    record_result(name, result)
    outcome = result.outcome
    if outcome.status == NA:
        pytest.skip(f"{check} not applicable: {outcome.message}")
    assert outcome.status == PASS, f"{name} {check}: {outcome.message} [{outcome.figure}]"
