"""What a chat turn returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..stats import GenerationStats

__all__ = ["ChatStats", "Reply"]


@dataclass
class ChatStats(GenerationStats):
    """A chat turn's stats: the request's, plus what the session's cache did.

    ``tokens_reused`` counts history positions served from the session's K/V and
    ``tokens_computed`` the positions computed in this turn (the new message, the template glue,
    the previous reply's last token, and anything recomputed after an eviction or a restart).
    """

    session: str = ""
    turn_id: int = 0
    history_tokens: int = 0  # conversation positions before this turn's user message
    history_recomputed: int = 0  # of those, computed again (eviction, restart without snapshot, new weights)
    turns_evicted: int = 0  # turns that left the cache before this turn
    tokens_evicted: int = 0
    cache_edits: int = 0  # edits plugins made through percache_edit_cache (approximate)
    eviction: str = ""  # the eviction mode used in this turn ("" when nothing was evicted)
    kv_tokens: int = 0  # cache positions after the turn
    kv_bytes: int = 0  # resident K/V bytes after the turn
    blocks_reused: int = 0  # prefix blocks from the K/V store that extended the session's cache
    blocks_published: int = 0  # of this session's blocks, stored in the K/V store after the turn
    # "snapshot" / "ids" when the session was loaded from the store; "weights_changed" when the
    # model's weights (an adapter, an in-place edit) changed since the last turn
    restored_from: str = ""
    # ids of the memory facts recalled into this turn's context; the memory recall fills them,
    # the turn log (``pc.turn_log``) records them with the turn
    fact_ids: list[int | str] = field(default_factory=list)
    memory_tokens: int = 0  # tokens of the recalled facts in this turn, or of the memory region
    # memory region (Config.memory_recall_mode 'splice'): fact positions served from stored per-fact
    # K/V, of those the ones RoPE-shifted from another position or context (approximate), the
    # first tokens of shifted facts computed again in context, and facts whose K/V was stored
    memory_spliced_tokens: int = 0
    memory_shifted_tokens: int = 0
    memory_recomputed_tokens: int = 0
    memory_facts_stored: int = 0
    persona: str = ""  # the persona the turn ran under ("" none)
    persona_switched: bool = False  # the session's head was another one: the conversation was recomputed
    # where the persona's head K/V came from: "snapshot" (read from the store), "stored" (computed
    # in this turn and snapshotted), "session" (already in the session's cache); "" no persona
    persona_head: str = ""
    persona_head_tokens: int = 0  # head positions read from or written to the snapshot
    persona_load_s: float = 0.0  # reading the head snapshot into the cache
    log_id: int = 0  # the turn's row in the turn log (0: not logged, see store_errors)


@dataclass
class Reply:
    """The result of :meth:`PerCache.chat`.

    :ivar text: the reply, decoded (special tokens skipped).
    :ivar token_ids: the ids the model generated (the conversation keeps them as they are,
        without a trailing end-of-turn token).
    :ivar turn_id: the turn's id in its session.
    :ivar prompt_ids: the conversation ids the model saw (all history in context + this turn).
    :ivar first_logits: fp32 logits at the last prompt position.
    """

    text: str
    token_ids: list[int]
    turn_id: int
    stats: ChatStats
    prompt_ids: list[int] = field(repr=False, default_factory=list)
    first_logits: torch.Tensor | None = field(default=None, repr=False)
