"""The table of settings QA answers are bound to covers every Config field."""

from __future__ import annotations

import dataclasses

from percache_plugin.config import Config
from percache_plugin.plugins.answer_binding import ANSWER_SETTINGS, BOUND_SETTINGS, answer_model


def test_every_config_field_is_decided_once() -> None:
    names = [s.name for s in ANSWER_SETTINGS]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(Config))
    assert all(s.why for s in ANSWER_SETTINGS)


def test_each_bound_setting_changes_the_binding_and_the_others_do_not() -> None:
    base = answer_model("fp", Config())
    assert answer_model("fp", Config(), use_template=False) != base
    assert answer_model("fp2", Config()) != base
    other = {"system_prompt": "x", "chunk_separator": "\n", "top_k": 1, "memory_in_ask": False,
             "memory_k": 1, "memory_threshold": 0.5, "relevance_threshold": 0.5,
             "answer_grounding": False, "reuse": "shifted", "recompute": "none",
             "storage_dtype": "float16"}
    assert sorted(other) == sorted(BOUND_SETTINGS)
    for name, value in other.items():
        assert answer_model("fp", Config(**{name: value})) != base, name
    assert answer_model("fp", Config(similarity_threshold=0.5, drafting=False, chunk_words=10)) == base
