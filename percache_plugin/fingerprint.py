"""A model fingerprint: K/V stored for one model (or adapter) is never served to another."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

__all__ = ["model_fingerprint"]

# Values sampled per parameter: enough to tell any two fine-tunes or adapters apart without
# hashing hundreds of megabytes of weights on every enable().
_SAMPLES = 256
_VOLATILE_CONFIG_KEYS = ("_attn_implementation", "_attn_implementation_internal", "_name_or_path",
                         "transformers_version", "_commit_hash", "dtype", "torch_dtype")


def _config_digest(model: Any) -> bytes:
    cfg = model.config.to_dict()
    for key in _VOLATILE_CONFIG_KEYS:
        cfg.pop(key, None)
    return json.dumps(cfg, sort_keys=True, default=str).encode()


def _weights_digest(model: torch.nn.Module, h: Any) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            step = max(1, flat.numel() // _SAMPLES)
            sample = flat[::step][:_SAMPLES].to(torch.float32).cpu()
            h.update(name.encode())
            h.update(str(tuple(p.shape)).encode())
            h.update(sample.numpy().tobytes())


def _tokenizer_digest(tokenizer: Any) -> bytes:
    vocab = tokenizer.get_vocab()
    items = sorted(vocab.items())
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(items).encode())
    h.update(str(getattr(tokenizer, "chat_template", "")).encode())
    return h.digest()


def _adapter_digest(model: Any) -> bytes:
    # peft models name their active adapter(s); their weights are in named_parameters already.
    active = getattr(model, "active_adapters", None)
    try:
        names = active() if callable(active) else active
    except ValueError:  # transformers raises when no adapter is loaded
        names = None
    return json.dumps(sorted(names) if names else []).encode()


def model_fingerprint(model: Any, tokenizer: Any) -> str:
    """Hash of config, sampled weights, tokenizer vocabulary and template, dtype and adapters."""
    h = hashlib.blake2b(digest_size=16)
    h.update(_config_digest(model))
    h.update(str(next(model.parameters()).dtype).encode())
    h.update(_tokenizer_digest(tokenizer))
    h.update(_adapter_digest(model))
    _weights_digest(model, h)
    return h.hexdigest()
