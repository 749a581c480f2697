"""The docs' example of adding a family (GLM-4) the built-in profile table does not know."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

import percache_plugin as percache
from percache_plugin import hookimpl
from percache_plugin.attention.profile import ModelProfile
from percache_plugin.conformance import FAIL, PASS, SuiteOptions, byte_tokenizer, run_suite
from tests.conformance.helpers import TINY_GLM4, by_name, from_config, install_entry_point

DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"
SHIFT_CHECKS = ["rope_shift", "splice_recompute_all", "shifted_reuse"]


def plugin_source() -> str:
    """The plugin module exactly as docs/conformance.md shows it."""
    match = re.search(r"<!-- plugin: percache_glm4\.py -->\n```python\n(.*?)```", DOC.read_text(),
                      re.DOTALL)
    assert match, "docs/conformance.md lost its plugin example"
    return match.group(1)


def load_plugin(tmp_path: Path) -> ModuleType:
    path = tmp_path / "percache_glm4_docs.py"
    path.write_text(plugin_source(), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("percache_glm4_docs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class WrongLayout:
    """Declares GLM-4 rotate-half: a declared profile is trusted, so only the suite can catch it."""

    @hookimpl
    def percache_model_profile(self, model: object) -> ModelProfile | None:
        if model.config.model_type != "glm4":  # type: ignore[attr-defined]
            return None
        return ModelProfile("glm4", "rope", rotate="half")


def test_guessed_profile_is_probed_and_passes() -> None:
    # An unknown family's layout is probed with a forward (attention/rope_verify.py): GLM-4's
    # interleaved pairs are found without a plugin.
    report = run_suite(from_config("glm4", **TINY_GLM4), byte_tokenizer(), checks=SHIFT_CHECKS)
    result = by_name(report)["rope_shift"]
    assert result.status == PASS and "interleaved" in result.outcome.message


def test_wrongly_declared_profile_fails_the_rope_check() -> None:
    report = run_suite(from_config("glm4", **TINY_GLM4), byte_tokenizer(), checks=SHIFT_CHECKS,
                       options=SuiteOptions(plugins=(WrongLayout(),)))
    result = by_name(report)["rope_shift"]
    assert result.status == FAIL
    assert "layout ('half')" in result.outcome.message


def test_docs_plugin_through_entry_point_makes_everything_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_entry_point(tmp_path, monkeypatch, "percache_glm4", plugin_source())
    model = from_config("glm4", **TINY_GLM4)
    pc = percache.enable(model, byte_tokenizer())
    assert pc.shifter is not None and pc.shifter.rotate == "interleaved"
    pc.disable()
    report = run_suite(model, byte_tokenizer(), label="tiny-glm4")
    assert report.ok, [(r.name, r.outcome.message) for r in report.results if not r.ok]
    assert by_name(report)["rope_shift"].outcome.value < 1e-4
    assert [c.status for c in report.capabilities] == ["supported", "supported"]


def test_plugin_given_to_the_suite_reaches_the_engine(tmp_path: Path) -> None:
    """The suite passes its plugins to enable(plugins=...), so the engine's shifter uses the
    profile too and every shifted check passes."""
    plugin = load_plugin(tmp_path)
    report = run_suite(from_config("glm4", **TINY_GLM4), byte_tokenizer(), checks=SHIFT_CHECKS,
                       options=SuiteOptions(plugins=(plugin,)))
    results = by_name(report)
    for name in SHIFT_CHECKS:
        assert results[name].status == PASS, (name, results[name].outcome.message)
