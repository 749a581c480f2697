"""Grouped-query attention of a verify forward with each key/value head's query heads folded
into one block of rows.

A forward verifying ``k`` draft tokens over a cache attends with a mask (the causal block at the
end of the cache); percache's sdpa (``attention/gqa.py``) then calls torch's CPU kernel with
``enable_gqa=True``, which attends query head by query head: every key/value head is read
``groups`` times (3 for SmolLM2's 9 query and 3 key/value heads), each time for only ``k + 1``
query rows. Those small blocks ran 1.7-3x one token's attention for 2-6 rows over 2,000 cached
positions (docs/BENCHMARKS.md, "Verify forwards nearer one-token cost"). Query head ``h`` reads
key/value head ``h // groups``, so the ``groups x (k + 1)`` query rows of one key/value head can
attend as one block of rows under the same mask repeated per group: the same softmax per row,
each key/value head read once. The values equal the per-head kernel's except for float rounding
in its small matrix products (measured on SmolLM2: none for ``k >= 3``, at most 5e-5 on the
logits for ``k = 1, 2``); drafted decoding counts every token chosen near such a rounding
(``stats.draft_near_ties``).

:func:`folded_sdpa` is called by the verify forwards' routing mode (:mod:`.packed`) in place of
``torch.nn.functional.scaled_dot_product_attention`` where :func:`fold_applies`; nothing of the
model's code is replaced.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["fold_applies", "folded_sdpa"]

_KWARGS = frozenset({"attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"})


def fold_applies(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an sdpa call with ``args`` and ``kwargs`` is one :func:`folded_sdpa` computes:
    query, key and value as positional 4D CPU float tensors, grouped heads with
    ``enable_gqa=True``, several query rows, a 4D mask shared by every head, no dropout and no
    ``is_causal``."""
    if len(args) != 3 or not set(kwargs) <= _KWARGS or not kwargs.get("enable_gqa"):
        return False
    query, key, value = args
    mask = kwargs.get("attn_mask")
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 and t.device.type == "cpu"
               and t.is_floating_point() for t in (query, key, value)):
        return False
    heads, kv_heads = query.shape[1], key.shape[1]
    return (isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.shape[1] == 1
            and mask.shape[2] == query.shape[2] and query.shape[2] > 1
            and kv_heads < heads and heads % kv_heads == 0 and value.shape[1] == kv_heads
            and not kwargs.get("is_causal", False) and not kwargs.get("dropout_p", 0.0))


def folded_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor,
                scale: float | None = None) -> torch.Tensor:
    """``scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, scale=scale,
    enable_gqa=True)`` (to float rounding) with each key/value head's query heads attending
    as one block of rows. ``query``: (batch, heads, rows, dim); ``key``, ``value``: (batch,
    kv_heads, positions, dim); ``attn_mask``: (batch or 1, 1, rows, positions)."""
    batch, heads, rows, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    folded = query.reshape(batch, kv_heads, groups * rows, dim)
    m = attn_mask[:, :, None].expand(attn_mask.shape[0], 1, groups, rows, attn_mask.shape[-1])
    mask = m.reshape(attn_mask.shape[0], 1, groups * rows, attn_mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=mask, scale=scale)
    return out.reshape(batch, heads, rows, value.shape[-1])
