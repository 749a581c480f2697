"""A chat session never serves K/V computed under other weights: after a peft adapter is
disabled, switched or edited in place mid-conversation, the next turn equals plain generate
under the weights now in use, the history is computed again (stats say so), and the session is
saved under the new weights' fingerprint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from tests.fingerprint.test_follows_model import lora
from tests.helpers import baseline, tiny_pair

peft = pytest.importorskip("peft")

GEN = {"max_new_tokens": 4, "do_sample": False}


def _check(pc: Any, model: Any, message: str) -> Any:
    reply = pc.chat(message, session="s", **GEN)
    with pc.disabled():
        want, want_logits = baseline(model, reply.prompt_ids, 4)
    assert reply.token_ids == want
    assert reply.first_logits is not None
    diff = (reply.first_logits - want_logits).abs().max().item()
    assert diff <= 1e-4, f"first-token logits off by {diff:.3g}: stale session K/V"
    return reply


def test_adapter_disabled_mid_conversation_recomputes_the_history(tmp_path: Path) -> None:
    base, tok = tiny_pair("llama")
    model = lora(base)
    pc = percache.enable(model, tok, store=tmp_path)
    pc.sessions.create("s", system="Be brief.")
    _check(pc, model, "Hi there.")
    _check(pc, model, "What is on Friday?")
    on = pc.fingerprint
    with model.disable_adapter():
        reply = _check(pc, model, "And Monday?")
        assert pc.fingerprint != on
        assert reply.stats.restored_from == "weights_changed"
        assert reply.stats.history_recomputed == reply.stats.history_tokens > 0
        assert reply.stats.tokens_reused == 0
        reply = _check(pc, model, "Thanks!")  # the new cache is reused from here on
        assert reply.stats.history_recomputed == 0 and reply.stats.tokens_reused > 0
    reply = _check(pc, model, "Who brings the projector?")  # adapter back on: computed again
    assert pc.fingerprint == on and reply.stats.restored_from == "weights_changed"
    pc.close()


def test_adapter_switched_and_weight_edited_in_place() -> None:
    base, tok = tiny_pair("llama")
    model = lora(base)
    lora(model, "other", seed=7)
    pc = percache.enable(model, tok)
    pc.sessions.create("s")
    _check(pc, model, "Hi there.")
    model.set_adapter("other")
    assert _check(pc, model, "What is on Friday?").stats.restored_from == "weights_changed"
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if "lora_B" in n and "other" in n).add_(0.5)
    assert _check(pc, model, "And Monday?").stats.restored_from == "weights_changed"
    pc.close()


def test_session_saved_under_the_new_weights_resumes_there(tmp_path: Path) -> None:
    base, tok = tiny_pair("llama")
    model = lora(base)
    pc = percache.enable(model, tok, store=tmp_path)
    pc.sessions.create("s")
    _check(pc, model, "Hi there.")
    with model.disable_adapter():
        _check(pc, model, "What is on Friday?")
        off = pc.fingerprint
        pc.close()
        pc = percache.enable(model, tok, store=tmp_path)
        assert pc.fingerprint == off
        reply = _check(pc, model, "And Monday?")  # the snapshot written under these weights
        assert reply.stats.restored_from == "snapshot" and reply.stats.history_recomputed == 0
        assert len(reply.prompt_ids) > reply.stats.tokens_computed
    pc.sessions.delete("s")  # gone under every fingerprint
    pc.close()
    pc = percache.enable(model, tok, store=tmp_path)
    assert "s" not in pc.sessions.names()
    pc.close()
    with model.disable_adapter():
        pc = percache.enable(model, tok, store=tmp_path)
        assert "s" not in pc.sessions.names()
    assert not any(p.suffix == ".safetensors" for p in (tmp_path / "sessions").rglob("*"))
    pc.close()
