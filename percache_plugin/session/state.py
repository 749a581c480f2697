"""A conversation's state: its token ids by turn and the K/V cache that serves them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from os.path import commonprefix
from typing import Any

import torch
from transformers import DynamicCache

__all__ = ["RegionFact", "Turn", "Session", "copy_turn", "share_cache", "cache_tokens", "cache_bytes", "crop_to"]


@dataclass
class Turn:
    """One exchange: the user turn's ids (glue + message + generation prompt) and the reply's.

    :ivar turn_id: 1-based, never reused within a session (evicted turns keep their ids).
    :ivar pinned: never evicted.
    :ivar fact_ids: the memory facts recalled as text into this turn (``memory_recall_mode``
        'text'): ``user_ids`` then hold the memory block before the message.
    :ivar bare_ids: with ``fact_ids``, the turn's user ids without the memory block (what
        ``user_ids`` become when one of those facts is forgotten); None otherwise.
    """

    turn_id: int
    message: str
    user_ids: list[int]
    reply_ids: list[int] = field(default_factory=list)
    reply_text: str = ""
    pinned: bool = False
    masked: bool = False  # excluded from attention (``masked`` eviction), slots still resident
    fact_ids: list[str] = field(default_factory=list)
    bare_ids: list[int] | None = None

    @property
    def ids(self) -> list[int]:
        return self.user_ids + self.reply_ids

    @property
    def n_tokens(self) -> int:
        return len(self.user_ids) + len(self.reply_ids)

    def drop_user(self, offsets: set[int]) -> None:
        """Remove the user ids at ``offsets``; the same ids leave :attr:`bare_ids` (those
        before and after the memory block, where both lists agree; ids inside the block have no
        counterpart there)."""
        user = self.user_ids
        if self.bare_ids is not None and offsets:
            bare = self.bare_ids
            lead = len(commonprefix([user, bare]))
            tail = min(len(commonprefix([user[::-1], bare[::-1]])), min(len(user), len(bare)) - lead)
            extra = len(user) - len(bare)
            gone = {i for i in offsets if i < lead} | {i - extra for i in offsets if i >= len(user) - tail}
            self.bare_ids = [t for i, t in enumerate(bare) if i not in gone]
        self.user_ids = [t for i, t in enumerate(user) if i not in offsets]


@dataclass(frozen=True)
class RegionFact:
    """A memory fact in a session's memory region: its id, the hash of the text it was
    tokenized from (an updated fact never keeps its old ids) and its ids (``- text`` and a
    newline, tokenized on its own)."""

    fact_id: str
    text_hash: str
    ids: tuple[int, ...]


@dataclass
class Session:
    """A conversation: the persistent head (template opening + system prompt), the memory
    region (recalled facts, ``Config.memory_recall_mode`` 'splice'), the turns still in
    context, and a cache over a prefix of :attr:`ids`.

    The cache never holds more positions than :attr:`ids`; the positions it lacks (at most the
    last reply token after a turn) are computed with the next turn.

    :ivar keep: for the ``masked`` eviction mode, a boolean per cache slot (False: excluded
        from attention); None when every slot is attended.
    """

    name: str
    system: str | None
    head_ids: list[int]
    first_glue: str
    turns: list[Turn] = field(default_factory=list)
    cache: Any = field(default_factory=DynamicCache)
    next_turn: int = 1
    evicted_turns: int = 0
    keep: torch.Tensor | None = None
    saved_upto: int = 0  # cache positions persisted and still valid
    rewrite: bool = False  # turns were evicted or edited since the last save
    restored: str = ""  # "snapshot" / "ids" / "weights_changed" until the next turn
    fingerprint: str = ""  # the weights the cache was computed under ("" before any turn)
    approx_from: int | None = None  # first cache position whose K/V is not exact (None: all are)
    shifted_from: int | None = None  # of those, the first 'shifted' eviction RoPE-shifted (not stored)
    region_shifted_from: int | None = None  # the first of a fact shifted into the memory region (not stored)
    published: list[str] = field(default_factory=list, repr=False)  # block keys in the K/V store
    version: int = 0  # the stored version this copy continues (persist.py, chat_version)
    memory: list[RegionFact] = field(default_factory=list)  # the memory region's facts, in order
    memory_header: list[int] = field(default_factory=list)  # ids before the facts (with any fact)
    memory_scope: str | None = None  # the memory scope the region's facts come from
    unreadable_turns: list[int] = field(default_factory=list)  # turn ids whose saved rows were corrupt (turn_rows.py)
    head_unreadable: bool = False  # its saved head_ids were corrupt: the next turn tokenizes the head again
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def memory_ids(self) -> list[int]:
        """The memory region's ids: the header and every fact's ids (none without facts)."""
        if not self.memory:
            return []
        out = list(self.memory_header)
        for f in self.memory:
            out += f.ids
        return out

    @property
    def turns_start(self) -> int:
        """Position of the first turn: after the head and the memory region."""
        return len(self.head_ids) + len(self.memory_ids)

    @property
    def ids(self) -> list[int]:
        """The conversation in context: head, memory region, then every turn's user and reply ids."""
        out = list(self.head_ids) + self.memory_ids
        for t in self.turns:
            out += t.ids
        return out

    @property
    def n_tokens(self) -> int:
        return self.turns_start + sum(t.n_tokens for t in self.turns)

    def approximate_from(self, position: int) -> None:
        """Positions from ``position`` on no longer hold exact K/V (shifted, masked, edited)."""
        self.approx_from = position if self.approx_from is None else min(self.approx_from, position)

    def reuses_approximate(self, cached: int) -> bool:
        """Whether a turn over the first ``cached`` cache positions attends to K/V that a fresh
        prefill of :attr:`ids` would not give: positions from :attr:`approx_from` on (shifted,
        edited, spliced from elsewhere) or masked turns' slots left out. True for every turn
        until those positions leave, not only for the turn that made them."""
        if self.approx_from is not None and self.approx_from < cached:
            return True
        return self.keep is not None and not bool(self.keep[:cached].all())

    def cropped(self, n: int) -> None:
        """The cache was cropped to ``n`` positions and what follows is computed again from the
        ids: if everything approximate went, the cache is exact again."""
        if self.approx_from is not None and self.approx_from >= n:
            self.approx_from = None
        if self.shifted_from is not None and self.shifted_from >= n:
            self.shifted_from = None
        if self.region_shifted_from is not None and self.region_shifted_from >= n:
            self.region_shifted_from = None

    @property
    def ephemeral_tokens(self) -> int:
        """Tokens of unpinned, unmasked turns (what the session budget bounds)."""
        return sum(t.n_tokens for t in self.turns if not t.pinned and not t.masked)

    def glue(self) -> str | None:
        """The glue the next user turn starts with (None: the glue after a reply)."""
        return self.first_glue if not self.turns else None


def copy_turn(t: Turn) -> Turn:
    """A copy of ``t`` whose id lists are its own."""
    from dataclasses import replace

    return replace(t, user_ids=list(t.user_ids), reply_ids=list(t.reply_ids), fact_ids=list(t.fact_ids),
                   bare_ids=None if t.bare_ids is None else list(t.bare_ids))


def cache_tokens(cache: Any) -> int:
    return int(cache.get_seq_length()) if cache.layers else 0


def crop_to(cache: Any, n: int) -> None:
    """Keep the first ``n`` positions of ``cache`` (``Cache.crop`` takes how many to remove)."""
    remove = cache_tokens(cache) - max(n, 0)
    if remove > 0:
        cache.crop(-remove)


def cache_bytes(cache: Any) -> int:
    """Resident bytes of a cache's K/V."""
    total = 0
    for lay in cache.layers:
        for t in (lay.keys, lay.values):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def share_cache(cache: Any) -> DynamicCache:
    """A new cache over the same K/V tensors (no copy). Safe because a DynamicCache grows by
    concatenation and crops by slicing: neither writes into the shared tensors."""
    out = DynamicCache()
    for i, lay in enumerate(cache.layers):
        if lay.keys is None or not lay.keys.numel():
            continue
        out.update(lay.keys[..., :0, :], lay.values[..., :0, :], i)
        target: Any = out.layers[i]
        target.keys, target.values = lay.keys, lay.values
    return out
