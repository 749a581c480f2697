"""The drafted decoding set up per request: why it is off, when the weights are packed."""

from __future__ import annotations

import percache_plugin as percache
from percache_plugin.decode import DraftHints
from percache_plugin.stats import GenerationStats
from tests.helpers import SEGMENTS, baseline, tiny_pair


def test_drafting_says_why_it_is_off() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, drafting=False)
    prompt = pc.prompt(SEGMENTS)
    stats = GenerationStats()
    assert pc.engine.drafting(prompt, {"do_sample": False}, None, stats) is None
    assert stats.drafting == "off"
    pc.configure(drafting=True)
    stats = GenerationStats()
    assert pc.engine.drafting(prompt, {"do_sample": True}, None, stats) is None
    assert stats.drafting == "sampling"
    assert pc.engine.drafting(prompt, {"do_sample": False}, None, GenerationStats()) is not None
    with pc.disabled():
        stats = GenerationStats()
        assert pc.engine.drafting(prompt, {"do_sample": False}, None, stats) is None
        assert stats.drafting == "off"
    pc.close()


def test_no_weights_are_packed_before_a_first_token() -> None:
    # Packing the linear weights took ~0.45 s on SmolLM2: a one-token request, and the first
    # forward of any request (even one verifying drafts), use the model's kernels; the copies are
    # made at the first verify forward after a first token.
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, draft_verify_cost=(1.0,))
    plain, _ = baseline(model, pc.prompt(SEGMENTS).input_ids, max_new_tokens=24)
    pc.generate(SEGMENTS, max_new_tokens=1)
    assert not pc.engine.drafts.packed
    hints = DraftHints(token_ids={"session": [plain]})
    gen = pc.generate(SEGMENTS, max_new_tokens=7, drafts=hints)  # one forward: pending + 6 drafts
    assert gen.token_ids == plain[:7] and gen.stats.decode_forwards == 1
    assert gen.stats.packed_linear_calls == 0 and not pc.engine.drafts.packed
    gen = pc.generate(SEGMENTS, max_new_tokens=24)
    assert gen.token_ids == plain and gen.stats.packed_linear_calls > 0
    assert pc.engine.drafts.packed
    pc.close()
