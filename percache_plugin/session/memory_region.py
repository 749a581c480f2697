"""A session's memory region (memory level L1): recalled facts kept after the head, each fact's
K/V computed once, stored in the K/V store and spliced back at its position.

The conversation is ``head + region + turns``; the region is ``header + fact_1 + fact_2 + ...``
(each fact ``- text`` and a newline, tokenized on its own), empty without facts. It is part of
the persistent side of the session: turn eviction never touches it, and it does not count
against ``session_kv_tokens``.

* :func:`plan_region`, before a turn: the region's facts as they should be. Facts already in it
  stay where they are unless forgotten (they leave), updated (the new text takes the old
  text's place) or superseded (the superseding fact takes its place); newly recalled facts are
  appended; over ``memory_region_facts`` the oldest facts not recalled in the turn leave.
* :func:`apply_region`: when the region changes, the cache is cropped at the first changed
  position, so no K/V that attended to a fact no longer in the conversation stays (the turns
  after it are computed again with the turn: exact, counted in ``history_recomputed``). Then
  each new fact is spliced from its stored K/V: as it is when it was computed at the same
  position after the same ids (bit-identical to prefilling them), otherwise (``splice`` mode
  only) RoPE-shifted to the new position with its first ``memory_recompute_head`` tokens
  computed again in context (approximate: ``stats.approximate`` and ``approx_from``). A fact
  without stored K/V, the header and anything not spliced are computed with the turn.
* :func:`store_region`, after a turn: the K/V of region facts the store lacks, sliced from the
  session's cache where it is exact, keyed by fingerprint, fact id and text hash (a changed
  text never reads the old K/V), with the position and a hash of the ids before it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..best_effort import best_effort
from ..cache_arg import cache_kw
from ..config import Config
from ..decode import dtype_device
from ..kv.cache import slice_chunk
from ..kv.rounded import drop_if_rounded
from ..kv.store import ChunkKV, NodeInfo
from ..memory.recall import MEMORY_HEADER, memory_block
from ..reuse import count_origin
from ..segments import PromptPiece, Segment
from .blocks import drop_blocks, exact_tokens
from .persist import SessionStore
from .recalled import cut_at, without_recalled
from .reply import ChatStats, Reply
from .state import RegionFact, Session, cache_tokens

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["RegionMemory", "apply_region", "fact_kv_key", "forget_fact", "hash_ids", "plan_region", "region_fact", "region_tokens",
           "store_region", "turn_memory", "without_fact"]

# ``current(fact_id)`` -> the (id, text) serving in the fact's place now (itself, its updated
# text, the fact that superseded it) or None (forgotten)
Current = Callable[[str], "tuple[str, str] | None"]


def hash_ids(ids: Sequence[int]) -> str:
    return hashlib.blake2b(json.dumps(list(ids)).encode(), digest_size=16).hexdigest()


def _text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def region_fact(tokenizer: Any, fact_id: str, text: str) -> RegionFact:
    ids = tokenizer(f"- {text}\n", add_special_tokens=False)["input_ids"]
    return RegionFact(fact_id, _text_hash(text), tuple(int(t) for t in ids))


def fact_kv_key(fingerprint: str, fact: RegionFact) -> str:
    """The K/V store key of a fact's K/V: the weights, the fact's id and its text's hash."""
    h = hashlib.blake2b(digest_size=16)
    for part in ("memory-fact", fingerprint, fact.fact_id, fact.text_hash):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def plan_region(session: Session, recalled: Sequence[tuple[str, str]], current: Current,
                scope: str | None, cap: int, tokenizer: Any) -> list[RegionFact]:
    """The region's facts for this turn (see the module docstring); ``recalled`` are the
    turn's facts, best first. Facts of another scope than ``scope`` all leave."""
    kept: list[RegionFact] = []
    if session.memory_scope == scope:
        for fact in session.memory:
            now = current(fact.fact_id)
            if now is None:
                continue
            same = now[0] == fact.fact_id and _text_hash(now[1]) == fact.text_hash
            kept.append(fact if same else region_fact(tokenizer, *now))
    out: list[RegionFact] = []
    for fact in kept + [region_fact(tokenizer, i, t) for i, t in recalled]:
        if all(f.fact_id != fact.fact_id for f in out):
            out.append(fact)
    wanted = {i for i, _ in recalled}
    while len(out) > cap:
        old = next((f for f in out if f.fact_id not in wanted), out[0])
        out.remove(old)
    return out


@dataclass
class RegionMemory:
    """What sessions read from ``pc.memory`` (set by the handle): ``recall(message, scope)`` ->
    the turn's ``[(fact id, text)]``; ``current(fact_id)`` (see :data:`Current`)."""

    recall: Callable[[str, str | None], list[tuple[str, str]]] | None = None
    current: Current = field(default=lambda fact_id: None)
    # ``after_turn(session, message, reply, scope)``: queue the turn for extraction
    after_turn: Callable[[str, str, Reply, str | None], object] | None = None
    # ``forget_again(fact_ids)``: forget once more those of the facts that are forgotten
    forget_again: Callable[[list[str]], object] | None = None

    def turn_done(self, engine: Engine, session: Session, message: str, reply: Reply,
                  scope: str | None) -> list[str]:
        """Queue the turn for extraction, called holding the session's lock: a delete of the
        session waits for it, then drops it from the queue (queued after the delete, its facts
        would come back). Best effort: the reply stands, ``reply.stats.store_errors`` counts it.
        Returns the ids of the facts the session holds (region, turns that recalled facts)."""
        if self.after_turn is not None:
            with best_effort("queueing the turn for memory extraction", engine.stats(), reply.stats):
                self.after_turn(session.name, message, reply, scope)
        return list(dict.fromkeys([f.fact_id for f in session.memory] + [f for t in session.turns for f in t.fact_ids]))

    def recheck(self, engine: Engine, held: list[str], reply: Reply) -> None:
        """After the turn saved and released the session: forget again the facts of ``held``
        forgotten meanwhile. Another handle's or process's ``forget`` cannot wait for this turn,
        which recalled the fact before and saved it (region, turn ids, K/V) after; either that
        forget's cleaning sees the saved turn, or this check sees the fact forgotten."""
        if held and self.forget_again is not None:
            with best_effort("forgetting facts forgotten during the turn", engine.stats(), reply.stats):
                self.forget_again(held)

    def turn(self, session: Session, message: str, scope: str | None, stats: ChatStats,
             engine: Engine) -> tuple[str, list[RegionFact] | None]:
        """The turn's recalled facts (``stats.fact_ids``) as :func:`turn_memory` places them.
        Turns that recalled a fact as text which no longer serves (superseded by a newer fact,
        or forgotten, by any handle or process) lose their memory block first (:mod:`.recalled`)."""
        for fact_id in dict.fromkeys(f for t in session.turns for f in t.fact_ids):
            now = self.current(fact_id)
            cut = without_recalled(session, fact_id) if now is None or now[0] != fact_id else None
            if cut is not None:
                session.published = session.published[:cut[0] // engine.config.prefix_block_tokens]
        on = self.recall is not None and engine.config.memory_recall
        facts = self.recall(message, scope) if on and self.recall is not None else []
        stats.fact_ids = [fact_id for fact_id, _ in facts]
        return turn_memory(session, facts if on else None, engine.config, self.current, scope,
                           engine.tokenizer)


def turn_memory(session: Session, facts: Sequence[tuple[str, str]] | None, config: Config,
                current: Current, scope: str | None, tokenizer: Any) -> tuple[str, list[RegionFact] | None]:
    """What a turn does with its recalled ``facts`` (None: recall is off): the text put before
    the message (``memory_recall_mode`` 'text'), and the region to set (None: leave it; a
    session with a region and recall off or in 'text' mode loses it)."""
    if facts is not None and config.memory_recall_mode != "text":
        region = plan_region(session, facts, current, scope, config.memory_region_facts, tokenizer)
        session.memory_scope = scope
        return "", region
    return memory_block([text for _, text in facts or []]), [] if session.memory else None


def without_fact(session: Session, fact_id: str) -> int | None:
    """Take ``fact_id`` out of the session's region and crop the cache before it (the K/V after
    it attended to it and is computed again with the next turn); the position cropped at, or
    None when the fact was not there."""
    if all(f.fact_id != fact_id for f in session.memory):
        return None
    return _set_region(session, [f for f in session.memory if f.fact_id != fact_id], ChatStats())


def forget_fact(engine: Engine, live: Sequence[Session], store: SessionStore | None, fact_id: str, *,
                keep_region: bool = False) -> int:
    """Take a forgotten fact out of every session: the regions and the turns it was recalled
    into as text (:mod:`.recalled`) of the sessions in memory (their caches cropped before
    it), the same in saved sessions under every fingerprint with their K/V slices from there
    on (their snapshots then end before it, :mod:`.forget_rows`), and the prefix blocks that
    held it or followed it, under every fingerprint and block size, found from the ids (the
    caller deletes those its tags name too, :mod:`.block_tags`). Returns the sessions
    changed. ``keep_region`` (an updated fact): the regions of the sessions in memory keep it
    (the next turn puts its new text in the old one's place); saved sessions drop it."""
    changed = set()
    for session in live:
        with session.lock, engine.lock:
            ids = session.ids
            region = None if keep_region else without_fact(session, fact_id)
            recalled = without_recalled(session, fact_id)
            starts = [s for s in (region, recalled[0] if recalled else None) if s is not None]
            if not starts:
                continue
            start = min(starts)
            drop_blocks(engine.store, ids, start)
            session.published = session.published[:start // engine.config.prefix_block_tokens]
            changed.add((session.fingerprint, session.name))
    for cut in store.drop_fact(fact_id) if store is not None else []:
        drop_blocks(engine.stores.get(cut.fingerprint, engine.config), cut.former_ids, cut.start)
        changed.add((cut.fingerprint, cut.name))
    return len(changed)


def _set_region(session: Session, new: list[RegionFact], stats: ChatStats) -> int:
    """Make ``new`` the region and crop the cache at the first changed position; returns it."""
    old = session.memory
    same = 0
    while same < min(len(old), len(new)) and old[same] == new[same]:
        same += 1
    head = len(session.head_ids)
    start = head if same == 0 else head + len(session.memory_header) + sum(len(f.ids) for f in new[:same])
    cut_at(session, start, stats)
    session.memory = list(new)
    return start


def region_tokens(engine: Engine, session: Session, region: list[RegionFact]) -> int:
    """The length of the memory region made of ``region`` (header and facts; 0 when empty)."""
    if region and not session.memory_header:
        session.memory_header = list(engine.tokenizer(MEMORY_HEADER, add_special_tokens=False)["input_ids"])
    return sum(len(f.ids) for f in region) + (len(session.memory_header) if region else 0)


def apply_region(engine: Engine, session: Session, new: list[RegionFact], stats: ChatStats,
                 shifted: bool) -> None:
    """Make ``new`` the session's region and splice the facts' stored K/V into the cache (see
    the module docstring); ``shifted``: facts whose K/V was computed elsewhere are shifted
    (else they are computed with the turn)."""
    stats.memory_tokens = region_tokens(engine, session, new)
    if not shifted:  # 'splice' is off: no shifted fact stays
        first = session.region_shifted_from
        if first is None and session.approx_from is not None \
                and len(session.head_ids) <= session.approx_from < session.turns_start:
            first = session.approx_from  # a restored session does not know where: its approx_from
        if first is not None:
            cut_at(session, first, stats)
    if new == session.memory:
        return
    start = _set_region(session, new, stats)
    if not new or not engine.config.use_kv:
        return
    ids = session.ids
    pos = len(session.head_ids) + len(session.memory_header)
    shifter = engine.shifter if shifted else None
    dtype, device = dtype_device(engine.model)
    for fact in new:
        begin, pos = pos, pos + len(fact.ids)
        if begin < start or begin < cache_tokens(session.cache):
            continue  # kept as it was, or already in the cache
        found = _load(engine, fact)
        if found is None:
            continue  # computed with the turn (and stored after it)
        kv, source, context = found
        exact = source == begin and context == hash_ids(ids[:begin]) and (
            session.approx_from is None or session.approx_from >= begin)
        if not exact and shifter is None:
            continue
        head = 0 if exact else min(engine.config.memory_recompute_head, len(fact.ids))
        _compute(engine, session, ids[:begin + head])
        if cache_tokens(session.cache) != begin + head:
            return
        _append(session, kv, head, 0 if exact else begin - source, shifter, dtype, device)
        stats.memory_spliced_tokens += len(fact.ids) - head
        stats.memory_recomputed_tokens += head
        stats.bytes_loaded += kv.nbytes
        count_origin(kv, stats)
        if not exact and len(fact.ids) > head:
            stats.memory_shifted_tokens += len(fact.ids) - head
            stats.approximate = True
            session.approximate_from(begin + head)
            first = session.region_shifted_from
            session.region_shifted_from = begin + head if first is None else min(first, begin + head)
        if kv.keys[0].dtype != dtype:
            stats.approximate = True
            session.approximate_from(begin)


def _load(engine: Engine, fact: RegionFact) -> tuple[ChunkKV, int, str] | None:
    """The fact's K/V, the position it was computed at and the hash of the ids before it there
    ('' unless exact), from the row the tensors were read with (``ChunkKV.row``): the key holds
    no position, so the row looked up first may have been replaced before the load. A loader
    that does not say its row: used only when the row is the same before and after the load."""
    key = fact_kv_key(engine.fingerprint, fact)
    before = engine.store.info(key)
    if before is None:  # not stored: no load, no miss counted
        return None
    kv = engine.hooks.load_chunk(engine.ctx, key, fact.ids)
    if kv is None or kv.n_tokens != len(fact.ids) or drop_if_rounded(
            engine.store, key, kv, dtype_device(engine.model)[0], engine.config.torch_storage_dtype):
        return None
    row = kv.row if kv.row is not None else before if _same_row(before, engine.store.info(key)) else None
    if row is None:
        return None
    return kv, row.start, row.extra.get("context", "") if row.extra.get("exact") == "1" else ""


def _same_row(a: NodeInfo, b: NodeInfo | None) -> bool:
    return b is not None and (a.created, a.start, a.token_hash, a.extra) == (b.created, b.start, b.token_hash, b.extra)


def _compute(engine: Engine, session: Session, ids: list[int]) -> None:
    """Run the model over the ids the cache lacks (a plain forward on the cache's end)."""
    have = cache_tokens(session.cache)
    if len(ids) <= have:
        return
    device = next(engine.model.parameters()).device
    with torch.inference_mode():
        engine.model(input_ids=torch.tensor([ids[have:]], device=device),
                     **cache_kw(session.cache), use_cache=True)


def _append(session: Session, kv: ChunkKV, skip: int, delta: int, shifter: Any,
            dtype: torch.dtype, device: torch.device) -> None:
    cache = session.cache
    for layer in range(len(kv.keys)):
        k, v = kv.keys[layer][:, skip:], kv.values[layer][:, skip:]
        if delta:
            k, v = shifter.shift_kv(k, v, layer, delta)
        cache.update(k.to(device=device, dtype=dtype)[None], v.to(device=device, dtype=dtype)[None],
                     layer)


def store_region(engine: Engine, session: Session, stats: ChatStats) -> None:
    """Store the K/V of region facts the store lacks, where the session's cache holds it exactly."""
    if not session.memory or not engine.config.use_kv or not engine.enabled:
        return
    ids = session.ids
    exact = exact_tokens(session)
    pos = len(session.head_ids) + len(session.memory_header)
    for fact in session.memory:
        begin, pos = pos, pos + len(fact.ids)
        if pos > exact:
            return
        key = fact_kv_key(engine.fingerprint, fact)
        if engine.store.contains(key):
            continue
        piece = PromptPiece(Segment("", "chunk", id=fact.fact_id), fact.ids, begin, None)
        extra = {"memory": "1", "context": hash_ids(ids[:begin])}  # the built-in store adds chunk, exact
        if engine.hooks.store_chunk(engine.ctx, key, piece, None, slice_chunk(session.cache, begin, pos),
                                    True, extra):
            stats.memory_facts_stored += 1
