"""A node stored at a lower precision is a miss (and deleted) only for a caller keeping K/V exact."""

from __future__ import annotations

import torch

from percache_plugin.kv.rounded import drop_if_rounded
from percache_plugin.kv.store import KVStore
from tests.kv.test_store import FP, ids, make_kv


def test_a_rounded_node_is_dropped_for_an_exact_caller_only() -> None:
    store = KVStore(None, fingerprint=FP, storage_dtype=torch.float16)
    store.put("a", make_kv(1), parent=None, start=0, token_ids=ids())
    kv = store.get("a", token_ids=ids())
    assert kv is not None and kv.keys[0].dtype == torch.float16
    assert not drop_if_rounded(store, "a", kv, torch.float32, torch.float16)  # rounding was asked for
    assert not drop_if_rounded(store, "a", kv, torch.float16, None)  # the model's own dtype
    assert store.contains("a")
    assert drop_if_rounded(store, "a", kv, torch.float32, None)
    assert not store.contains("a")
    assert drop_if_rounded(store, "a", kv, torch.float32, None)  # gone already: still a miss
