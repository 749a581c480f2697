"""A handle's parts are its engine's and its assistant's, not copies."""

from __future__ import annotations

import percache_plugin as percache
from tests.helpers import tiny_pair


def test_parts_are_the_engines_and_the_assistants() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    e, a = pc.engine, pc.assistant
    assert pc.model is model is e.model and pc.tokenizer is tok is e.tokenizer
    assert pc.config is e.config and pc.store is e.store and pc.plugins is e.plugins
    assert pc.hooks is e.hooks and pc.capabilities is e.capabilities and pc.shifter is e.shifter
    assert pc.n_parameters == sum(p.numel() for p in model.parameters())
    assert pc.fingerprint == e.fingerprint and pc.enabled
    assert pc.knowledge is a.knowledge and pc.qa_bank is a.qa_bank and pc.idle_queue is a.idle_queue
    assert pc.prediction_state is a.prediction_state and pc.background_stats is a.background_stats
    assert pc.embedder is a.embedder
    pc.close()
    assert not pc.enabled
