"""Drafted decoding on the real SmolLM2: the same tokens as plain greedy decoding, per source."""

from __future__ import annotations

from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.decode import DraftHints
from percache_plugin.demo import SAMPLE_CHUNKS, SYSTEM

pytestmark = pytest.mark.slow


def test_each_source_gives_plain_greedy_tokens_on_smollm2(smollm2: tuple[Any, Any]) -> None:
    model, tok = smollm2
    pc = percache.enable(model, tok, drafting=False)
    segments = [SYSTEM, *SAMPLE_CHUNKS, "Who borrowed the projector?"]
    plain = pc.generate(segments, max_new_tokens=24, do_sample=False)
    words = plain.text.split()
    near = " ".join(w if i % 4 != 3 else "maybe" for i, w in enumerate(words))  # a near miss
    hints = DraftHints(texts={"qa_bank": [near]}, token_ids={"session": [plain.token_ids[:10]]})
    for only in (("prompt",), ("qa_bank",), ("session",), None):
        pc.configure(drafting=True, draft_sources=only, draft_verify_cost=(1.0,))  # verify every draft
        gen = pc.generate(segments, max_new_tokens=24, do_sample=False, drafts=hints)
        assert gen.token_ids == plain.token_ids, only
        assert gen.stats.tokens_drafted > 0, only
    pc.close()
