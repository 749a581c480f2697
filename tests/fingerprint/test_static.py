"""A store reopened by another model of the same family and shapes, in another dtype or with
another tokenizer is a miss, never a hit: greedy tokens equal plain generate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from tests.helpers import SEGMENTS, VOCAB, baseline, tiny_pair
from tests.models import tiny_model
from tests.tokenizer import byte_tokenizer


def _write(path: Path, model: Any, tok: Any) -> str:
    pc = percache.enable(model, tok, store=path)
    pc.generate(SEGMENTS, max_new_tokens=4)
    assert pc.generate(SEGMENTS, max_new_tokens=4).stats.tokens_reused > 0
    fingerprint = pc.fingerprint
    pc.close()
    return str(fingerprint)


def _reopen_misses(path: Path, model: Any, tok: Any, written: str) -> None:
    pc = percache.enable(model, tok, store=path)
    assert pc.fingerprint != written
    g = pc.generate(SEGMENTS, max_new_tokens=4)
    assert g.stats.tokens_reused == 0 and not g.stats.approximate
    want, _ = baseline(model, list(g.prompt_ids), 4)
    assert g.token_ids == want
    pc.close()


@pytest.mark.parametrize("family", ["llama", "mistral"])  # mistral: sliding window
def test_the_same_weights_in_bfloat16_miss(tmp_path: Path, family: str) -> None:
    model, tok = tiny_pair(family)
    written = _write(tmp_path, model, tok)
    _reopen_misses(tmp_path, tiny_pair(family)[0].to(torch.bfloat16), tok, written)


def test_another_model_of_the_same_family_and_shapes_misses(tmp_path: Path) -> None:
    model, tok = tiny_pair("qwen2")
    written = _write(tmp_path, model, tok)
    _reopen_misses(tmp_path, tiny_model("qwen2", vocab_size=VOCAB, seed=1), tok, written)


def test_another_tokenizer_misses(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    written = _write(tmp_path, model, tok)
    _reopen_misses(tmp_path, model, byte_tokenizer(chat_template=False), written)
