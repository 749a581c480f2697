"""sdpa for grouped-query attention without copying the key/value heads.

transformers' ``sdpa_attention_forward`` passes ``enable_gqa=True`` to
``torch.nn.functional.scaled_dot_product_attention`` only when there is no attention mask (and
on CUDA-like devices). A forward that feeds several tokens over a cache always has a mask (the
causal block at the end of the cache), so it copies every key and value head ``groups`` times
(``repeat_kv``) in every layer first. On a CPU that copy and the attention over the copies cost
SmolLM2-135M about 30% of a forward feeding 2-5 tokens over 600 cached ones
(docs/BENCHMARKS.md, "What a verify forward costs"): exactly the forwards that verify drafts.

:func:`grouped_sdpa` calls the kernel with ``enable_gqa=True`` and the mask instead, on the CPU
where torch's kernel computes it head by head exactly as over the copies (the same values, bit
for bit: ``tests/attention/test_gqa.py``); every other call goes to transformers' function.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

__all__ = ["grouped_sdpa", "groups_kept"]


def groups_kept(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, kwargs: dict[str, Any]) -> bool:
    """Whether :func:`grouped_sdpa` computes this call itself (else transformers does): grouped
    heads, several query tokens, a mask, on the CPU, nothing that transformers' function
    handles specially (position bias, a paged cache, softcap, attention weights)."""
    groups = getattr(module, "num_key_value_groups", 1)
    if not (isinstance(groups, int) and groups > 1 and attention_mask is not None):
        return False
    # Each read of a tensor's shape or device is a Python call inside drafted decoding's routing
    # mode (decode/packed.py), once per layer: each is read once.
    qs, ks = query.shape, key.shape
    return (
        qs[2] > 1
        and ks[1] * groups == qs[1]
        and query.device.type == "cpu"
        and ks[-1] == value.shape[-1]
        and not any(kwargs.get(k) is not None for k in ("position_bias", "cache", "softcap"))
        and not kwargs.get("output_attentions", False)
    )


def grouped_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """``sdpa_attention_forward`` with the same arguments and result; grouped heads with a mask
    on the CPU (:func:`groups_kept`) are attended without copying the key/value heads."""
    if not groups_kept(module, query, key, value, attention_mask, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=float(kwargs.get("dropout", 0.0)),
        scale=kwargs.get("scaling"), enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None
