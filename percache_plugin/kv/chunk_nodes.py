"""The K/V nodes computed for given chunks (``NodeInfo.extra["chunk"]``), found and deleted: what
a replaced or removed document, or a forgotten fact, leaves behind in a store."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .store import KVStore

__all__ = ["chunk_node_keys", "delete_chunk_nodes", "delete_chunk_kv", "delete_nodes"]


def chunk_node_keys(store: KVStore, chunk_ids: Collection[str]) -> set[str]:
    """The keys of the nodes ``store`` holds for these chunks."""
    return {n.key for n in store.nodes() if n.extra.get("chunk") in chunk_ids}


def delete_nodes(store: KVStore, keys: Collection[str]) -> int:
    """Delete these nodes with the nodes computed after them; returns how many.

    :raises OSError: a deletion failed (the store logs and counts a failed write in
        ``write_errors`` instead of raising it): the caller's forget must not count as done. A
        node another handle or process stores again meanwhile is no failure: its own check
        after storing deletes it."""
    failures = store.write_errors
    removed = sum(store.delete(key) for key in sorted(keys))  # a key gone already: 0
    if store.write_errors > failures:
        raise OSError(f"{store.write_errors - failures} deletion(s) of K/V nodes of removed sources failed "
                      f"in {store!r} (the store's log says why)")
    return removed


def delete_chunk_nodes(store: KVStore, chunk_ids: Collection[str]) -> int:
    """Delete the nodes of these chunks with the nodes computed after them (:func:`delete_nodes`)."""
    return delete_nodes(store, chunk_node_keys(store, chunk_ids))


def delete_chunk_kv(stores: Iterable[KVStore], chunk_ids: Collection[str]) -> int:
    """Delete the nodes of these chunks (with the nodes computed after them) from every store
    given, one per model fingerprint: K/V computed under other weights (an adapter, an earlier
    model) holds the chunk's text as much as the current model's. Each deletion takes the
    store's write lock (:class:`~.locks.WriteLock`); returns how many nodes went. Every store is
    tried; the first failure (:func:`delete_chunk_nodes`) is raised after the last."""
    removed = 0
    failed: OSError | None = None
    for store in stores:
        try:
            removed += delete_chunk_nodes(store, chunk_ids)
        except OSError as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return removed
