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


def test_token_trees_give_plain_greedy_tokens_on_smollm2(smollm2: tuple[Any, Any]) -> None:
    model, tok = smollm2
    pc = percache.enable(model, tok, drafting=False)
    trees = 0
    for question in ("Who borrowed the projector?", "What is due on Friday?"):
        segments = [SYSTEM, *SAMPLE_CHUNKS, question]
        pc.configure(drafting=False)
        plain = pc.generate(segments, max_new_tokens=32, do_sample=False)
        words = plain.text.split()
        # two near misses, wrong at different words: the trees branch where they disagree
        near = [" ".join(w if i % n != n - 1 else "maybe" for i, w in enumerate(words)) for n in (3, 4)]
        hints = DraftHints(texts={"qa_bank": near}, token_ids={"session": [plain.token_ids[:10]]})
        pc.configure(drafting=True, draft_sources=None, draft_tree=True, draft_verify_cost=(1.0,))
        gen = pc.generate(segments, max_new_tokens=32, do_sample=False, drafts=hints)
        assert gen.token_ids == plain.token_ids, question
        trees += gen.stats.draft_tree_forwards
    assert trees > 0
    pc.close()
