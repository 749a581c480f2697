"""Tensors made under ``torch.inference_mode()`` have no version counter: a model loaded in it,
or a dynamic-NTK ``inv_freq`` recomputed in it, is fingerprinted without one."""

from __future__ import annotations

from pathlib import Path

import torch

import percache_plugin as percache
from tests.helpers import SEGMENTS, VOCAB, baseline, tiny_pair
from tests.models import tiny_model
from tests.tokenizer import byte_tokenizer

SHORT = ["Be brief.", "Mail: Friday.", "When?"]


def test_a_model_loaded_under_inference_mode_is_served(tmp_path: Path) -> None:
    with torch.inference_mode():
        model = tiny_model("llama", vocab_size=VOCAB)
    assert next(model.parameters()).is_inference()
    pc = percache.enable(model, byte_tokenizer(), store=tmp_path / "store")
    cold = pc.generate(SEGMENTS, max_new_tokens=6)
    warm = pc.generate(SEGMENTS, max_new_tokens=6)
    want, _ = baseline(model, cold.prompt_ids, 6)
    assert cold.token_ids == warm.token_ids == want and warm.stats.tokens_reused > 0
    # An in-place edit (possible only under inference mode) of a small tensor is seen.
    before = pc.engine.fingerprint
    with torch.inference_mode():
        model.model.norm.weight.mul_(2.0)
    pc.generate(SEGMENTS, max_new_tokens=1)
    assert pc.engine.fingerprint != before
    pc.close()


def test_dynamic_ntk_run_plainly_past_its_context_then_served(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama", rope_parameters={"rope_type": "dynamic", "factor": 2.0},
                           max_position_embeddings=64)
    pc = percache.enable(model, tok, store=tmp_path / "store")
    with pc.disabled():  # the caller's own generate past the context swaps in a new inv_freq
        baseline(model, list(range(5, 100)), 4)
    assert model.model.rotary_emb.inv_freq.is_inference()
    g = pc.generate(SHORT, max_new_tokens=4)  # raised: inference tensors track no version
    with pc.disabled():
        want, _ = baseline(model, g.prompt_ids, 4)
    assert g.token_ids == want
    pc.close()
