"""Shared pieces of the suite's own tests: tiny models and an entry-point installer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from percache_plugin.conformance import CheckResult, SuiteReport
from percache_plugin.hooks.manager import AUTOLOAD_ENV, ENTRY_POINT_GROUP

__all__ = ["by_name", "from_config", "install_entry_point", "TINY_GLM4"]

TINY_GLM4: dict[str, Any] = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 1,
}


def from_config(model_type: str, **kwargs: Any) -> Any:
    """A tiny random model of any family, built from its config (vocab fits the byte tokenizer)."""
    config = AutoConfig.for_model(model_type, vocab_size=320, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config).eval()


def by_name(report: SuiteReport) -> dict[str, CheckResult]:
    return {r.name: r for r in report.results}


def install_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str,
                        source: str) -> None:
    """Install ``source`` as module ``module``, registered in the ``percache`` entry-point group
    by a real ``.dist-info`` on ``sys.path`` (what ``pip install`` of a plugin package does)."""
    site = tmp_path / "site"
    dist = site / f"{module}-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{module} = {module}\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv(AUTOLOAD_ENV, raising=False)
