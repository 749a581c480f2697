"""The K/V nodes computed for given chunks (``NodeInfo.extra["chunk"]``), found and deleted: what
a replaced or removed document, or a forgotten fact, leaves behind in a store."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .store import KVStore

__all__ = ["chunk_node_keys", "delete_chunk_nodes", "delete_chunk_kv"]


def chunk_node_keys(store: KVStore, chunk_ids: Collection[str]) -> set[str]:
    """The keys of the nodes ``store`` holds for these chunks."""
    return {n.key for n in store.nodes() if n.extra.get("chunk") in chunk_ids}


def delete_chunk_nodes(store: KVStore, chunk_ids: Collection[str]) -> int:
    """Delete the nodes of these chunks with the nodes computed after them; returns how many."""
    return sum(store.delete(key) for key in sorted(chunk_node_keys(store, chunk_ids))
               if store.contains(key))


def delete_chunk_kv(stores: Iterable[KVStore], chunk_ids: Collection[str]) -> int:
    """Delete the nodes of these chunks (with the nodes computed after them) from every store
    given, one per model fingerprint: K/V computed under other weights (an adapter, an earlier
    model) holds the chunk's text as much as the current model's. Each deletion takes the
    store's write lock (:class:`~.locks.WriteLock`); returns how many nodes went."""
    return sum(delete_chunk_nodes(store, chunk_ids) for store in stores)
