"""Eviction policies of the K/V store (``kv/eviction.py``) and the store applying one."""

from __future__ import annotations

from collections.abc import Sequence

from percache_plugin.kv.eviction import StoredNode, expand_subtrees, lfu_leaves
from percache_plugin.kv.store import KVStore
from tests.kv.test_store import ids, make_kv


def node(key: str, parent: str | None, hits: int = 0, nbytes: int = 10, t: float = 0.0) -> StoredNode:
    return StoredNode(key, parent, nbytes, hits, t, t)


def test_lfu_leaves_takes_a_parent_only_after_its_children() -> None:
    nodes = [node("a", None, hits=0), node("b", "a", hits=5), node("c", None, hits=1)]
    assert lfu_leaves(nodes, 30, None) == []
    assert lfu_leaves(nodes, 20, None) == ["c"]  # a has a child: not a candidate yet
    assert lfu_leaves(nodes, 0, None) == ["c", "b", "a"]
    assert lfu_leaves(nodes, 0, "c") == ["b", "a", "c"]  # protected goes last


def test_expand_subtrees_follows_children_and_drops_unknown_keys() -> None:
    nodes = [node("a", None), node("b", "a"), node("c", "b"), node("d", None)]
    assert expand_subtrees(["a", "zz", "c"], nodes) == ["a", "b", "c"]


def test_store_uses_the_given_policy_and_removes_a_chosen_parent_with_its_subtree() -> None:
    seen: list[tuple[int, str | None]] = []

    def oldest_root(nodes: Sequence[StoredNode], limit: int, protect: str | None) -> list[str]:
        seen.append((len(nodes), protect))
        return [min((n for n in nodes if n.parent is None), key=lambda n: n.created).key]

    store = KVStore(None, fingerprint="fp", eviction=oldest_root)
    store.put("r1", make_kv(1), parent=None, start=0, token_ids=ids())
    store.put("c1", make_kv(2, n=5), parent="r1", start=5, token_ids=ids(offset=5))
    store.put("r2", make_kv(3), parent=None, start=0, token_ids=ids(offset=9))
    assert store.set_byte_limit(store.total_bytes() - 1) == 2  # r1 and its child c1
    assert seen == [(3, None)]
    assert store.contains("r2") and not store.contains("r1") and not store.contains("c1")
    assert store.stats().evictions == 2
    store.close()
