"""Longrope (Phi-3 128k): a forward reaching past ``original_max_position_embeddings`` rotates
every position with the long factors, so K/V stored from a shorter prompt is not what plain
generate computes for a longer one. percache serves the original context only, and says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.decode import context_limit
from percache_plugin.session import MessageTooLong
from tests.helpers import baseline, tiny_pair

ORIGINAL = 128
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [4.0, 8.0, 16.0, 32.0],
            "original_max_position_embeddings": ORIGINAL, "rope_theta": 10_000.0}
SHORT = ["Be brief.", "Mail: rehearsal Friday.", "When?"]
LONG = [*SHORT[:2], "When is the rehearsal? " * 6]  # 175 tokens with the byte tokenizer


def _longrope() -> tuple[Any, Any]:
    # Phi3's config field overrides the one in rope_parameters: both are set.
    return tiny_pair("phi3", rope_parameters=dict(LONGROPE), max_position_embeddings=4096,
                     original_max_position_embeddings=ORIGINAL)


def test_context_is_the_original_one_for_longrope_only() -> None:
    model, _ = _longrope()
    assert context_limit(model) == ORIGINAL
    yarn, _ = tiny_pair("llama", rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 2048})
    assert context_limit(yarn) == yarn.config.max_position_embeddings


def test_a_prompt_past_the_original_context_is_refused_not_served_wrong(tmp_path: Path) -> None:
    model, tok = _longrope()
    pc = percache.enable(model, tok, store=tmp_path / "store")
    assert len(pc.prompt(SHORT).input_ids) + 8 <= ORIGINAL < len(pc.prompt(LONG).input_ids)
    pc.generate(SHORT, max_new_tokens=8)  # stores the chunks, computed with the short factors
    # Before, the long prompt reused them: first-token logits 5.7 off plain generate's, whose
    # forward rotates every position with the long factors.
    with pytest.raises(ValueError, match="original_max_position_embeddings=128"):
        pc.generate(LONG, max_new_tokens=8)
    with pytest.raises(ValueError, match="longrope"):
        pc.complete(pc.prompt(LONG).input_ids, max_new_tokens=8)
    warm = pc.generate(SHORT, max_new_tokens=8)  # within the original context: exact reuse
    with pc.disabled():
        want, _ = baseline(model, warm.prompt_ids, 8)
    assert warm.stats.tokens_reused > 0 and warm.token_ids == want
    pc.close()


def test_a_conversation_past_the_original_context_is_refused() -> None:
    model, tok = _longrope()
    pc = percache.enable(model, tok)
    pc.chat("Hello there.", max_new_tokens=8)
    with pytest.raises(MessageTooLong, match="longrope"):
        pc.chat("Tell me more. " * 8, max_new_tokens=8)
    pc.close()
