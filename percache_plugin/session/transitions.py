"""Whole-session changes of state, made holding the session's lock: a branch (``fork``), an
emptied conversation (``reset``), and a history computed again under other weights."""

from __future__ import annotations

import logging

from transformers import DynamicCache

from .evict import compact
from .state import Session, cache_tokens, copy_turn, share_cache

__all__ = ["branch", "empty", "follow_weights"]

log = logging.getLogger("percache")


def branch(src: Session, name: str) -> Session:
    """A branch of ``src`` named ``name``: the same turns, and a cache over the same K/V tensors
    until either side grows; its first save writes it whole, and its first turn tags the
    prefix blocks it holds as its own."""
    out = Session(
        name, src.system, list(src.head_ids), src.first_glue,
        [copy_turn(t) for t in src.turns], share_cache(src.cache), src.next_turn,
        src.evicted_turns, None if src.keep is None else src.keep.clone(),
        fingerprint=src.fingerprint, shifted_from=src.shifted_from, region_shifted_from=src.region_shifted_from)
    out.approx_from = src.approx_from  # its first turn publishes (tags) every block as its own:
    out.published = []  # a block both hold goes with the last of them (block_tags.py)
    out.memory, out.memory_header, out.memory_scope = list(src.memory), list(src.memory_header), src.memory_scope
    out.rewrite = True
    return out


def empty(session: Session, fresh: Session) -> None:
    """Forget ``session``'s conversation: it continues as ``fresh`` (a new session with its
    system prompt) would start."""
    session.turns, session.cache, session.keep = [], fresh.cache, None
    session.next_turn, session.evicted_turns = 1, 0
    session.saved_upto, session.rewrite = 0, False
    session.approx_from, session.published = None, []
    session.memory, session.memory_scope = [], None


def follow_weights(session: Session, fingerprint: str) -> None:
    """Never serve K/V computed under other weights: when the model's ``fingerprint`` is not
    the one the session's cache was computed under (an adapter enabled, disabled or switched; a
    weight edited in place), the conversation is kept and its history is computed again under
    the weights now in use, and saved under their fingerprint."""
    if session.fingerprint == fingerprint:
        return
    if session.fingerprint and cache_tokens(session.cache):
        log.info("percache: the model's weights changed; session %r's %d history tokens "
                 "are computed again", session.name, session.n_tokens)
        compact(session)  # masked turns leave, as they would without their slots
        session.cache, session.keep = DynamicCache(), None
        session.restored = "weights_changed"
    session.fingerprint = fingerprint
    session.saved_upto, session.rewrite = 0, True  # a new store: the first save is whole
