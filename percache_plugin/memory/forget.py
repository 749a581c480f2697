"""Forgetting a fact everywhere percache keeps it (used by ``pc.memory`` and the CLI).

Order: the fact's rows and history go first (one transaction; a tombstone keeps the id), then
its K/V nodes (recorded for it, tagged with its id as a chunk, or holding exactly its tokens),
with their descendants, then every stored answer built on it, then the SQLite WAL is
checkpointed and truncated. A crash part way leaves no servable trace: without the fact row
nothing retrieves it, and the K/V and answers left are removed by forgetting the id again
(:func:`forget_everywhere` accepts a tombstoned id), which the forget journal does by itself
(``forget_journal``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..kv.chunk_nodes import chunk_node_keys, delete_nodes
from ..kv.store import KVStore
from .bank import MemoryBank

__all__ = ["ForgetReport", "drop_kv", "forget_everywhere", "journal_ids"]


@dataclass(frozen=True)
class ForgetReport:
    """What was removed: K/V nodes, stored answers, and whether the WAL was emptied (False:
    another connection was reading; the next forget or a close empties it)."""

    fact_id: str
    kv_nodes: int
    answers: int
    scrubbed: bool


def forget_everywhere(bank: MemoryBank, fact_id: str, stores: Sequence[KVStore],
                      drop_answers: Callable[[list[str]], int],
                      token_ids: Callable[[str], Sequence[Sequence[int]]] | None = None) -> ForgetReport:
    """Forget ``fact_id`` (see the module docstring).

    :param stores: the K/V stores to clean (one per model fingerprint).
    :param drop_answers: deletes stored answers whose sources include the ids; returns how many.
    :param token_ids: the token id lists a text is stored under as a chunk (None: match K/V
        nodes by recorded keys and chunk ids only).
    :raises UnknownFact: the id was never a fact.
    """
    if bank.tombstoned(fact_id):
        keys: set[str] = set()
        text = None
    else:
        fact = bank.forget(fact_id)
        keys, text = set(fact.kv_keys), fact.text
    return ForgetReport(fact_id, drop_kv(stores, fact_id, keys, text, token_ids),
                        drop_answers([fact_id]), bank.scrub())


def journal_ids(bank: MemoryBank, fact_id: str) -> list[str]:
    """What a forget of ``fact_id`` writes to the forget journal: the id, unless it never was a
    fact (the forget raises ``UnknownFact``, nothing to complete later)."""
    return [fact_id] if bank.tombstoned(fact_id) or bank.find(fact_id) is not None else []


def drop_kv(stores: Sequence[KVStore], chunk_id: str, keys: set[str], text: str | None,
            token_ids: Callable[[str], Sequence[Sequence[int]]] | None) -> int:
    """Delete the K/V nodes of a fact (and their descendants) from every store."""
    removed = 0
    for store in stores:
        found = set(keys)
        found.update(chunk_node_keys(store, {chunk_id}))
        if text is not None and token_ids is not None:
            for ids in token_ids(text):
                found.update(n.key for n in store.find_by_tokens(ids))
        removed += delete_nodes(store, found)  # raises when one stays: the forget is run again
    return removed

