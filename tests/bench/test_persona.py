"""``percache bench persona``: its persona prompt and its bad input (the timed run needs SmolLM2)."""

from __future__ import annotations

import pytest

from percache_plugin.bench.persona import persona_prompt
from percache_plugin.cli import main
from tests.tokenizer import byte_tokenizer


def test_the_persona_prompt_reaches_the_token_count() -> None:
    tok = byte_tokenizer()
    for n in (1, 120, 500):
        text = persona_prompt(tok, n)
        assert len(tok(text, add_special_tokens=False)["input_ids"]) >= n
    assert persona_prompt(tok, 300) == persona_prompt(tok, 300)  # deterministic


@pytest.mark.parametrize("argv", [["--tokens", "0"], ["--repeats", "0"]])
def test_sizes_below_one_are_one_line_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "persona", *argv]) == 2
    assert "must be at least 1" in capsys.readouterr().err
