"""The grounding check: content words of a fact looked up in its source turn."""

from __future__ import annotations

import pytest

from percache_plugin.config import Config, ConfigError
from percache_plugin.memory.grounding import content_words, grounding


def test_content_words_drop_function_words_and_keep_names_and_numbers() -> None:
    words = content_words("Caroline went to the LGBTQ support group on 7 May, she went")
    assert words == ["caroline", "lgbtq", "support", "group", "7", "may"]


def test_share_of_content_words_found_in_the_source() -> None:
    turn = "Melanie: I painted a lake sunrise last year with my kids."
    assert grounding("Melanie paints a sunrise over a lake", turn).share == 1.0  # paints ~ painted
    invented = grounding("Melanie is a professional photographer in Berlin", turn)
    assert invented.share == pytest.approx(1 / 4)
    assert invented.missing == ("professional", "photographer", "berlin")
    assert grounding("It is what it is", turn).share == 1.0  # no content word: nothing to check
    assert grounding("Melanie has two kid", turn).missing == ("two", "kid")  # 3 letters: exact only


def test_config_range() -> None:
    with pytest.raises(ConfigError, match="memory_grounding"):
        Config(memory_grounding=1.5)


def test_a_word_is_found_by_its_stem_not_by_a_shared_beginning() -> None:
    turn = "Calvin: I moved to Boston and I keep painting landscapes."
    assert grounding("Calvin is a Calvinist", turn).missing == ("calvinist",)  # a prefix is not a stem
    assert grounding("Calvin paints landscapes", turn).share == 1.0
    assert grounding("Calvin paintings landscape", turn).share == 1.0  # stem applied twice
    assert grounding("Bostonian Calvin", turn).missing == ("bostonian",)
