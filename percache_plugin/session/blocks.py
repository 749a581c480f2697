"""Sessions and plain-prompt prefix blocks serve each other through the one K/V store.

A session's conversation ids are cut into blocks exactly as :func:`~percache_plugin.kv.blocks.block_prompt`
cuts a plain prompt (``Config.prefix_block_tokens`` tokens, keys chained by hash from the
fingerprint and every id before), so a block key names the same K/V whichever path computed it.

* :func:`publish_blocks`, at the end of a turn: every full block of the session's cache whose
  K/V is exact (before :attr:`Session.approx_from`) goes into the K/V store through the
  ``percache_store_chunk`` hook, like any computed piece (atomic files, fingerprint, byte limit,
  eviction). ``pc.complete`` on a prompt that starts with the conversation then reuses it, and
  so does another session whose head and turns render to the same ids. Each block is tagged
  with the session and the memory facts it holds first (:mod:`.block_tags`): deleting the
  session or forgetting a fact finds it there.
* :func:`extend_from_blocks`, before a turn is computed: when the session's cache lacks
  positions (a new session, a restore without a usable snapshot, after an eviction), the stored
  blocks that continue its exact prefix are loaded through ``percache_load_chunk`` and appended.

Nothing approximate is published: shifted eviction, masking and plugin edits set
``approx_from`` and only blocks before it are stored. Loaded blocks hold exact K/V of the same
ids at the same positions, so the turn equals a full prefill (a storage dtype other than the
model's makes the turn approximate, as for any reuse, and says so in stats; a handle keeping
K/V exact does not load blocks another handle stored rounded: :mod:`..kv.rounded`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ..decode import dtype_device
from ..kv.blocks import block_prompt, stored_prefix
from ..kv.cache import slice_chunk
from ..kv.rounded import drop_if_rounded
from ..kv.store import KVStore
from ..reuse import count_origin
from ..segments import PromptPiece
from .evict import turn_spans
from .reply import ChatStats
from .state import Session, cache_tokens

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["publish_blocks", "extend_from_blocks", "exact_tokens", "drop_blocks", "Tagger"]

log = logging.getLogger("percache")

# Records (before they are stored) that a session publishes blocks: ``(key, fact ids held)``.
Tagger = Callable[[Session, list[tuple[str, list[str]]]], None]


def exact_tokens(session: Session) -> int:
    """Cache positions whose K/V equals a full prefill of the session's ids."""
    n = cache_tokens(session.cache)
    return n if session.approx_from is None else min(n, session.approx_from)


def _blocks(engine: Engine, ids: list[int]) -> list[PromptPiece]:
    """The full blocks of ``ids`` (keys chained as ``pc.complete`` chains them)."""
    size = engine.config.prefix_block_tokens
    n_full = len(ids) // size
    if not n_full:
        return []
    # block_prompt keeps a tail of at least one token: hand it one extra position.
    prompt = block_prompt(ids[:n_full * size] + [0], size, engine.fingerprint)
    return [p for p in prompt.pieces if p.key is not None]


def publish_blocks(engine: Engine, session: Session, stats: ChatStats, tag: Tagger) -> int:
    """Store the session's exact full blocks the store lacks, each tagged first with ``tag``
    (a tag that cannot be written publishes nothing: ``stats.store_errors``); returns how many
    were stored."""
    if not engine.config.session_blocks or not engine.enabled:
        return 0
    pieces = _blocks(engine, session.ids[:exact_tokens(session)])
    known = session.published
    same = 0
    while same < min(len(known), len(pieces)) and known[same] == pieces[same].key:
        same += 1
    if pieces[same:]:
        recalls = _recalls(session)
        try:
            tag(session, [(str(p.key), sorted({f for at, f in recalls if at < p.end})) for p in pieces[same:]])
        except (OSError, sqlite3.Error) as exc:
            stats.store_errors += 1
            log.warning("percache: session %r's prefix blocks are not published: %s", session.name, exc)
            return 0
    stored = 0
    parent = pieces[same - 1].key if same else None
    for piece in pieces[same:]:
        assert piece.key is not None
        if not engine.store.contains(piece.key):
            kv = slice_chunk(session.cache, piece.start, piece.end)
            engine.hooks.store_chunk(engine.ctx, piece.key, piece, parent, kv, True)
            stored += 1
        parent = piece.key
    session.published = [p.key for p in pieces if p.key is not None]
    return stored


def _recalls(session: Session) -> list[tuple[int, str]]:
    """``(position, fact id)`` of each memory fact the conversation holds: the memory region's
    where they sit, those recalled as text into a turn at the turn's start."""
    out = []
    pos = len(session.head_ids) + len(session.memory_header)
    for fact in session.memory:
        out.append((pos, fact.fact_id))
        pos += len(fact.ids)
    spans = turn_spans(session)
    return out + [(spans[turn.turn_id][0], f) for turn in session.turns for f in turn.fact_ids]


def drop_blocks(store: KVStore, ids: list[int], start: int) -> int:
    """Delete the stored nodes that hold ``ids`` (a session's former conversation) at their own
    positions and reach past ``start``, with their descendants: prefix blocks of any block size
    (found by their chained keys, :func:`~percache_plugin.kv.blocks.stored_prefix`, so blocks
    stored under an earlier ``prefix_block_tokens`` go too); returns the nodes deleted."""
    return sum(store.delete(key) for key in stored_prefix(store, ids, start))  # a key gone with an earlier: 0


def extend_from_blocks(engine: Engine, session: Session, full: list[int], stats: ChatStats) -> int:
    """Append stored blocks that continue the session's exact cache over ``full`` (the turn's
    prompt ids; the last one is always left to compute); returns the positions added."""
    if not engine.config.session_blocks or not engine.enabled or session.keep is not None:
        return 0
    have = cache_tokens(session.cache)
    if have != exact_tokens(session):
        return 0  # the cache holds approximate K/V: exact blocks would not continue it
    size = engine.config.prefix_block_tokens
    if (len(full) - 1) // size * size <= have:
        return 0  # no full block beyond what the cache holds
    pieces = [p for p in _blocks(engine, full[:len(full) - 1]) if p.end > have]
    chunks = []
    for piece in pieces:
        assert piece.key is not None
        kv = engine.hooks.load_chunk(engine.ctx, piece.key, piece.token_ids) \
            if engine.store.contains(piece.key) else None
        if kv is None or drop_if_rounded(engine.store, piece.key, kv, dtype_device(engine.model)[0],
                                         engine.config.torch_storage_dtype):
            break
        chunks.append((piece, kv))
    if not chunks:
        return 0
    dtype, device = dtype_device(engine.model)
    cache = session.cache
    for layer in range(len(chunks[0][1].keys)):
        ks, vs = [], []
        for piece, kv in chunks:
            skip = max(0, have - piece.start)
            ks.append(kv.keys[layer][:, skip:])
            vs.append(kv.values[layer][:, skip:])
        k = torch.cat(ks, dim=1).to(device=device, dtype=dtype).unsqueeze(0)
        v = torch.cat(vs, dim=1).to(device=device, dtype=dtype).unsqueeze(0)
        cache.update(k, v, layer)
    added = chunks[-1][0].end - have
    stats.blocks_reused = len(chunks)
    stats.bytes_loaded += sum(kv.nbytes for _, kv in chunks)
    for _, kv in chunks:
        count_origin(kv, stats)
    if any(kv.keys[0].dtype != dtype for _, kv in chunks):
        stats.approximate = True
        session.approx_from = have if session.approx_from is None else min(session.approx_from, have)
    return added
