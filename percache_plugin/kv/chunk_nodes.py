"""The K/V nodes computed for given chunks (``NodeInfo.extra["chunk"]``), found and deleted: what
a replaced or removed document, or a forgotten fact, leaves behind in a store."""

from __future__ import annotations

from collections.abc import Collection

from .store import KVStore

__all__ = ["chunk_node_keys", "delete_chunk_nodes"]


def chunk_node_keys(store: KVStore, chunk_ids: Collection[str]) -> set[str]:
    """The keys of the nodes ``store`` holds for these chunks."""
    return {n.key for n in store.nodes() if n.extra.get("chunk") in chunk_ids}


def delete_chunk_nodes(store: KVStore, chunk_ids: Collection[str]) -> int:
    """Delete the nodes of these chunks with the nodes computed after them; returns how many."""
    return sum(store.delete(key) for key in sorted(chunk_node_keys(store, chunk_ids))
               if store.contains(key))
