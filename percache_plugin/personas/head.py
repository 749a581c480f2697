"""A persona turn's persistent head: the session takes the persona's system prompt, and an
empty session cache starts from the persona's head snapshot instead of prefilling it."""

from __future__ import annotations

import time

import torch
from transformers import DynamicCache

from ..reuse import count_origin
from ..session.evict import compact
from ..session.layout import ChatLayout
from ..session.reply import ChatStats
from ..session.state import Session, cache_tokens
from .heads import HeadLoader, HeadSnapshots
from .registry import Persona

__all__ = ["enter_head", "snapshot_head"]


def enter_head(session: Session, persona: Persona, layout: ChatLayout, snapshots: HeadSnapshots,
               fingerprint: str, stats: ChatStats, dtype: torch.dtype, device: torch.device,
               via: HeadLoader) -> bool:
    """Give ``session`` the persona's head and, when its cache is empty, load the head's K/V
    from the snapshot for ``fingerprint`` (read ``via`` the RAM tier: counted in
    ``stats.ram_hits`` / ``ram_misses``). Returns whether the head's K/V should be
    snapshotted after the turn (the cache was empty and no snapshot was found).

    A session whose head was another one (another persona, or none) keeps its turns; its
    cache is dropped and the whole conversation is computed again under the new head."""
    head, glue = layout.head(persona.system_prompt)
    stats.persona = persona.name
    if session.head_ids != head:
        if cache_tokens(session.cache):
            stats.history_recomputed += session.n_tokens - len(session.head_ids)
        compact(session)  # masked turns leave, as they would without their slots
        session.system, session.head_ids = persona.system_prompt, head
        if not session.turns:
            session.first_glue = glue
        session.cache, session.keep = DynamicCache(), None
        session.saved_upto, session.rewrite = 0, True
        stats.persona_switched = True
    if cache_tokens(session.cache):
        stats.persona_head = "session"
        return False
    t0 = time.perf_counter()
    kv = snapshots.load(fingerprint, head, via)
    if kv is None:
        return True
    count_origin(kv, stats)
    for i, (k, v) in enumerate(zip(kv.keys, kv.values, strict=True)):
        session.cache.update(k.to(device=device, dtype=dtype)[None], v.to(device=device, dtype=dtype)[None], i)
    stats.persona_head = "snapshot"
    stats.persona_head_tokens = len(head)
    stats.persona_load_s = time.perf_counter() - t0
    return False


def snapshot_head(session: Session, snapshots: HeadSnapshots, fingerprint: str, stats: ChatStats) -> None:
    """Store the K/V of the session's head (computed in this turn) as the persona's snapshot."""
    n = len(session.head_ids)
    if cache_tokens(session.cache) < n:
        return
    kv = [(lay.keys[0, :, :n], lay.values[0, :, :n]) for lay in session.cache.layers]
    snapshots.put(fingerprint, session.head_ids, kv)
    stats.persona_head = "stored"
    stats.persona_head_tokens = n
