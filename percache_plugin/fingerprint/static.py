"""What identifies a model besides its weights: config, dtype, tokenizer vocabulary and template."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["static_digest"]

_VOLATILE_CONFIG_KEYS = ("_attn_implementation", "_attn_implementation_internal", "_name_or_path",
                         "transformers_version", "_commit_hash", "dtype", "torch_dtype")


def _config_digest(model: Any) -> bytes:
    cfg = model.config.to_dict()
    for key in _VOLATILE_CONFIG_KEYS:
        cfg.pop(key, None)
    return json.dumps(cfg, sort_keys=True, default=str).encode()


def _tokenizer_digest(tokenizer: Any) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    h.update(str(getattr(tokenizer, "chat_template", "")).encode())
    return h.digest()


def static_digest(model: Any, tokenizer: Any) -> bytes:
    """Digest of the model's config (without volatile keys such as the attention
    implementation), its parameters' dtype, and the tokenizer's vocabulary and chat template."""
    h = hashlib.blake2b(digest_size=16)
    h.update(_config_digest(model))
    h.update(str(next(model.parameters()).dtype).encode())
    h.update(_tokenizer_digest(tokenizer))
    return h.digest()
