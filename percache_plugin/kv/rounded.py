"""K/V stored at a lower precision is never served to a handle that keeps K/V exact.

A handle with ``Config.storage_dtype`` set stores its K/V rounded (and reports its reuse as
approximate). Another handle on the same store and model with ``storage_dtype=None`` promises
bit-exact reuse: a rounded node is a miss for it, and is deleted so that the K/V it computes
instead takes the node's place (otherwise the node would be recomputed at every request).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .chunk import ChunkKV
    from .store import KVStore

__all__ = ["drop_if_rounded"]


def drop_if_rounded(store: KVStore, key: str, kv: ChunkKV, dtype: torch.dtype,
                    storage_dtype: torch.dtype | None) -> bool:
    """True (and ``key`` deleted from ``store``) when ``kv`` is not in the model's ``dtype``
    while the caller keeps K/V exact (``storage_dtype`` None); False otherwise."""
    if storage_dtype is not None or kv.keys[0].dtype == dtype:
        return False
    if store.contains(key):
        store.delete(key)  # a failed delete is logged and counted by the store
    return True
