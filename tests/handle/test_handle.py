"""The handle's API: enable() with a Config, configure() applies or refuses every field, close()."""

from __future__ import annotations

import pytest
import torch

import percache_plugin as percache
from percache_plugin.config import ConfigError
from tests.helpers import SEGMENTS, tiny_pair


def test_enable_takes_a_config_and_overrides() -> None:
    model, tok = tiny_pair("llama")
    cfg = percache.Config(top_k=5, reuse="shifted")
    pc = percache.enable(model, tok, None, cfg, top_k=2)
    assert pc.config.top_k == 2 and pc.config.reuse == "shifted"
    assert cfg.top_k == 5  # the caller's config is not changed
    pc.close()
    with pytest.raises(TypeError, match="Config"):
        percache.enable(model, tok, None, {"top_k": 2})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown"):
        percache.enable(model, tok, None, cfg, no_such_key=1)


def _stored_dtype(pc: percache.PerCache) -> torch.dtype:
    node = pc.store.nodes()[-1]
    kv = pc.store.get(node.key)
    assert kv is not None
    return kv.keys[0].dtype


def test_configure_applies_store_settings() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    pc.configure(storage_dtype="bfloat16", verify_checksums=False)
    assert pc.store.verify is False
    pc.generate(SEGMENTS, max_new_tokens=2)
    assert _stored_dtype(pc) == torch.bfloat16
    pc.close()


def test_configure_applies_chat_template_and_chunk_words() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash")
    with_template = pc.prompt(SEGMENTS).n_tokens
    pc.configure(chat_template=False)
    assert pc.prompt(SEGMENTS).n_tokens != with_template
    pc.add_documents(["one two three"])
    pc.configure(chunk_words=7)
    assert pc.knowledge.chunk_words == 7
    pc.close()


def test_configure_refuses_what_cannot_apply() -> None:
    model, tok = tiny_pair("llama", chat_template=False)
    pc = percache.enable(model, tok, embedder="hash")
    with pytest.raises(ConfigError, match="chat template"):
        pc.configure(chat_template=True)
    pc.configure(embedder="hash:32")  # nothing embedded yet: applies
    assert pc.embedder.dim == 32
    with pytest.raises(ConfigError, match="embedder cannot change"):
        pc.configure(embedder="hash:64", top_k=1)
    assert pc.config.top_k != 1 and pc.config.embedder == "hash:32"  # nothing changed
    pc.close()


def test_close_ends_disabled_reverses() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    with pc.disabled():
        assert not pc.enabled
    assert pc.enabled
    pc.close()
    assert not pc.enabled
    pc.close()  # idempotent
