"""pytest front end of the conformance suite.

``pytest conformance --model PATH`` runs every check on that model, one test per check; without
``--model`` it runs the default set (nine tiny random families and SmolLM2 from its GGUF). A
check that does not apply is skipped with its reason; the capability table is printed at the end.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from percache_plugin.conformance import (  # noqa: E402
    BUILTIN_MODELS,
    CHECKS,
    CheckResult,
    Subject,
    SuiteOptions,
    SuiteReport,
    format_capability_table,
    load_model,
    summarize,
)
from percache_plugin.conformance.cli import default_threads  # noqa: E402
from percache_plugin.conformance.load import DTYPES, default_min_agreement  # noqa: E402

RESULTS = pytest.StashKey[dict[str, list[CheckResult]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("percache-conformance", "percache conformance suite")
    group.addoption("--model", action="append", default=[], metavar="PATH",
                    help="model path or hub id (offline), 'smollm2' or 'tiny:<family>'; "
                         "repeatable; default: the built-in set")
    group.addoption("--gguf-file", default=None, help="GGUF file inside --model")
    group.addoption("--dtype", default="float32", choices=sorted(DTYPES), help="load dtype")
    group.addoption("--trust-remote-code", action="store_true", default=False,
                    help="allow the model's own modeling code")
    group.addoption("--min-agreement", type=float, default=None,
                    help="shifted-reuse top-1 agreement threshold")
    group.addoption("--max-window-tokens", type=int, default=SuiteOptions().max_window_tokens,
                    help="longest prompt the sliding-window check may build")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[RESULTS] = {}
    torch.set_num_threads(min(torch.get_num_threads(), default_threads()))


def _models(config: pytest.Config) -> list[str]:
    return list(config.getoption("--model")) or list(BUILTIN_MODELS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_case" in metafunc.fixturenames:
        cases = [(m, c.name) for m in _models(metafunc.config) for c in CHECKS]
        metafunc.parametrize("conformance_case", cases,
                             ids=[f"{m.replace(':', '-')}-{c}" for m, c in cases])


class SubjectLoader:
    """Loads each model once, keeping only the current one (tests run model by model)."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._current: tuple[str, Subject | Exception] | None = None

    def _options(self, name: str) -> SuiteOptions:
        threshold = self._config.getoption("--min-agreement")
        if threshold is None:
            threshold = default_min_agreement(name) or SuiteOptions().min_agreement
        return SuiteOptions(min_agreement=threshold,
                            max_window_tokens=self._config.getoption("--max-window-tokens"))

    def get(self, name: str) -> Subject:
        if self._current is None or self._current[0] != name:
            self._current = None
            gc.collect()
            try:
                model, tok = load_model(
                    name, gguf_file=self._config.getoption("--gguf-file"),
                    dtype=self._config.getoption("--dtype"),
                    trust_remote_code=self._config.getoption("--trust-remote-code"))
                self._current = (name, Subject(model, tok, name, self._options(name)))
            except Exception as exc:  # remembered: one load failure, not one per check
                self._current = (name, exc)
        loaded = self._current[1]
        if isinstance(loaded, Exception):
            raise RuntimeError(f"loading {name!r} failed: {loaded}") from loaded
        return loaded


@pytest.fixture(scope="session")
def conformance_subjects(request: pytest.FixtureRequest) -> Iterator[SubjectLoader]:
    yield SubjectLoader(request.config)


@pytest.fixture
def record_result(request: pytest.FixtureRequest) -> Any:
    def record(label: str, result: CheckResult) -> None:
        request.config.stash[RESULTS].setdefault(label, []).append(result)
    return record


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(RESULTS, {})
    if not results:
        return
    reports = [SuiteReport(label, tuple(rs), summarize(rs), sum(r.seconds for r in rs))
               for label, rs in results.items()]
    terminalreporter.section("percache conformance: capabilities")
    for line in format_capability_table(reports).splitlines():
        terminalreporter.write_line(line)
