"""Config.meaning_guards switches the QA bank's meaning guards, and a hit served while a
guard is off that it would have refused is counted in the QA bank's stats."""

from __future__ import annotations

import pytest

import percache_plugin as percache
from percache_plugin.config import Config, ConfigError
from tests.helpers import tiny_pair

STORED = "Was the team meeting cancelled?"
ASKED = "Was the team meeting not cancelled?"  # hash embedder: similarity 0.83


def _handle(**overrides: object) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off", similarity_threshold=0.8,
                         **overrides)
    pc.qa_bank.add(STORED, "Yes, it was cancelled.")
    return pc


def test_meaning_guards_are_on_by_default_and_refuse_the_opposite() -> None:
    assert Config().meaning_guards == ("polarity", "antonym", "qtype", "object", "roles")
    pc = _handle()
    answer = pc.ask(ASKED, max_new_tokens=2)
    assert answer.source != "qa_bank"
    assert answer.rejected_by == "polarity"
    stats = pc.qa_bank.stats()
    assert stats["rejected"]["polarity"] == 1  # type: ignore[index]
    assert stats["served_with_guard_off"]["polarity"] == 0  # type: ignore[index]
    pc.close()


def test_switched_off_guards_serve_and_are_counted() -> None:
    pc = _handle(meaning_guards=())
    answer = pc.ask(ASKED, max_new_tokens=2)
    assert answer.source == "qa_bank"
    assert answer.text == "Yes, it was cancelled."
    assert pc.qa_bank.stats()["served_with_guard_off"]["polarity"] == 1  # type: ignore[index]
    # configure() switches them back on from the next call.
    pc.configure(meaning_guards=["polarity"])
    assert pc.config.meaning_guards == ("polarity",)
    assert pc.ask(ASKED, max_new_tokens=2).rejected_by == "polarity"
    pc.close()


@pytest.mark.parametrize("value", ["polarity", ("polarity", "sarcasm"), ("qtype", "qtype"), None, 3])
def test_bad_meaning_guards_are_refused_naming_the_field(value: object) -> None:
    with pytest.raises(ConfigError, match="meaning_guards"):
        Config(meaning_guards=value)  # type: ignore[arg-type]
