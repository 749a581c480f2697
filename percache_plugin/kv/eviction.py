"""Eviction policies of the K/V store: which nodes leave when the store is over its byte limit.

A policy is a callable ``policy(nodes, limit, protect) -> keys`` over the fingerprint's nodes
(:class:`StoredNode` rows of the index). It returns the keys to delete, in order, so that the
remaining bytes fit ``limit``; it should not return ``protect`` (the node just written) unless
nothing else can make room. Policies are registered by name through the
``percache_register_eviction_policies`` hook and chosen with ``Config.kv_eviction``; the
built-in one is ``"lfu-leaves"`` (:func:`lfu_leaves`).

A policy may return a node that still has children; the store then removes its descendants
too (a child's K/V is only reachable through its parent's prefix), and counts every removed
node as evicted.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["BUILTIN_POLICIES", "DEFAULT_POLICY", "EvictionPolicy", "StoredNode", "lfu_leaves",
           "expand_subtrees"]


@dataclass(frozen=True)
class StoredNode:
    """What a policy sees of one stored node (one row of the K/V index)."""

    key: str
    parent: str | None
    nbytes: int
    hits: int
    last_access: float
    created: float


class EvictionPolicy(Protocol):
    def __call__(self, nodes: Sequence[StoredNode], limit: int, protect: str | None) -> list[str]: ...


def lfu_leaves(nodes: Sequence[StoredNode], limit: int, protect: str | None) -> list[str]:
    """LFU over leaves: the leaf with the fewest hits (then the oldest access, then the oldest
    creation) goes first; a parent becomes a candidate once its children are gone."""
    total = sum(n.nbytes for n in nodes)
    if total <= limit:
        return []
    by_key = {n.key: n for n in nodes}
    n_children = Counter(n.parent for n in nodes if n.parent in by_key)

    def entry(n: StoredNode) -> tuple[int, float, float, str]:
        return (n.hits, n.last_access, n.created, n.key)

    heap = [entry(n) for n in nodes if n_children[n.key] == 0 and n.key != protect]
    heapq.heapify(heap)
    victims: list[str] = []
    while total > limit and heap:
        key = heapq.heappop(heap)[3]
        victims.append(key)
        total -= by_key[key].nbytes
        parent = by_key[key].parent
        if parent is not None and parent in by_key:
            n_children[parent] -= 1
            if n_children[parent] == 0 and parent != protect:
                heapq.heappush(heap, entry(by_key[parent]))
    if total > limit and protect is not None and protect in by_key and n_children[protect] == 0:
        victims.append(protect)  # its own ancestors fill the limit
    return victims


DEFAULT_POLICY = "lfu-leaves"
BUILTIN_POLICIES: dict[str, EvictionPolicy] = {DEFAULT_POLICY: lfu_leaves}


def expand_subtrees(chosen: Sequence[str], nodes: Sequence[StoredNode]) -> list[str]:
    """``chosen`` (keys a policy returned) with every descendant of each, in order, once;
    keys that name no stored node are dropped."""
    children: dict[str, list[str]] = {}
    for n in nodes:
        if n.parent is not None:
            children.setdefault(n.parent, []).append(n.key)
    known = {n.key for n in nodes}
    out: list[str] = []
    seen: set[str] = set()
    for key in chosen:
        stack = [key] if key in known else []
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            out.append(k)
            stack.extend(children.get(k, ()))
    return out
