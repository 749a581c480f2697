"""The K/V nodes of given chunks are found by their recorded chunk id and deleted with the
nodes computed after them; other chunks' nodes stay. A deletion the store could not write
raises (the forget journal runs the forget again)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from percache_plugin.kv.chunk_nodes import chunk_node_keys, delete_chunk_kv, delete_chunk_nodes
from percache_plugin.kv.store import DB_NAME, KVStore
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


def test_a_failed_deletion_raises_and_a_node_stored_again_meanwhile_does_not(tmp_path: Path) -> None:
    # the store only logs and counts a failed write; a forget must see it, and must not take
    # another handle storing the node again right after the deletion for one
    a, b = KVStore(tmp_path, fingerprint="fp"), KVStore(tmp_path, fingerprint="fp")
    node = {"kv": make_kv(1), "parent": None, "start": 0, "token_ids": ids(), "extra": {"chunk": "c1"}}
    a.put("a", **node)  # type: ignore[arg-type]
    a.add_listener(lambda key: b.contains(key) or b.put(key, **node))  # type: ignore[arg-type]
    assert delete_chunk_kv([a], {"c1"}) == 1
    assert a.contains("a")  # stored again by the other handle: its own check deletes it
    db = sqlite3.connect(tmp_path / DB_NAME, isolation_level=None)
    db.execute("CREATE TRIGGER fail_delete BEFORE DELETE ON kv_nodes BEGIN SELECT RAISE(ABORT, 'full'); END")
    with pytest.raises(OSError, match="deletion.s. of K/V nodes"):
        delete_chunk_kv([a], {"c1"})
    db.close()
    a.close()
    b.close()
