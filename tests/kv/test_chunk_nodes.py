"""The K/V nodes of given chunks are found by their recorded chunk id and deleted with the
nodes computed after them; other chunks' nodes stay."""

from __future__ import annotations

from percache_plugin.kv.chunk_nodes import chunk_node_keys, delete_chunk_nodes
from percache_plugin.kv.store import KVStore
from tests.kv.test_store import ids, make_kv


def test_a_chunks_nodes_go_with_their_descendants_and_nothing_else() -> None:
    with KVStore(None, fingerprint="fp") as store:
        store.put("a", make_kv(1), parent=None, start=0, token_ids=ids(), extra={"chunk": "c1"})
        store.put("ab", make_kv(2), parent="a", start=5, token_ids=ids(offset=5), extra={"chunk": "c2"})
        store.put("x", make_kv(3), parent=None, start=0, token_ids=ids(offset=9), extra={"chunk": "c3"})
        assert chunk_node_keys(store, {"c1", "c3"}) == {"a", "x"}
        assert delete_chunk_nodes(store, {"c1"}) == 2  # "ab" was computed after "a"
        assert sorted(n.key for n in store.nodes()) == ["x"]
        assert delete_chunk_nodes(store, {"nothing"}) == 0
