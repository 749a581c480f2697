"""One logged chat turn."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TurnRecord", "context_hash"]


def context_hash(prompt_ids: Sequence[int]) -> str:
    """blake2b (16 bytes, hex) of the token ids the model saw (little-endian int32 each):
    two turns with the same hash had the same context, token for token."""
    h = hashlib.blake2b(digest_size=16)
    h.update(b"".join(int(t).to_bytes(4, "little", signed=True) for t in prompt_ids))
    return h.hexdigest()


@dataclass(frozen=True)
class TurnRecord:
    """A chat turn as the log keeps it.

    :ivar log_id: the row's id in the log (unique in the store, never reused).
    :ivar session: the session's name.
    :ivar turn_id: the turn's id in its session (a reset session numbers its turns from 1 again).
    :ivar fingerprint: the fingerprint of the weights that generated the output.
    :ivar persona: the persona the turn ran under (None: no persona).
    :ivar system: the session's system prompt.
    :ivar history: ``(user message, reply)`` of every earlier turn still in context, oldest first.
    :ivar message: the user's message.
    :ivar output: the reply, as generated.
    :ivar context_hash: :func:`context_hash` of the prompt's token ids; empty once a fact
        recalled into the turn is forgotten (:meth:`TurnLog.forget_fact`).
    :ivar prompt_tokens: positions the model saw before the reply; 0 once a fact recalled
        into the turn is forgotten (its length would be the difference).
    :ivar fact_ids: ids of the memory facts recalled into the context (``ChatStats.fact_ids``).
    :ivar latency_s: from the call to the last reply token.
    :ivar ttft_s: from the call to the first reply token.
    :ivar created: when the turn was logged (Unix time).
    :ivar accepted: the user's verdict (None: none given).
    :ivar edited_text: the reply as the user corrected it (None: not corrected).
    :ivar feedback_at: when feedback was last given (Unix time; None: never).
    """

    log_id: int
    session: str
    turn_id: int
    fingerprint: str
    persona: str | None
    system: str | None
    history: tuple[tuple[str, str], ...]
    message: str
    output: str
    context_hash: str
    prompt_tokens: int
    fact_ids: tuple[int | str, ...]
    latency_s: float
    ttft_s: float
    created: float
    accepted: bool | None = None
    edited_text: str | None = None
    feedback_at: float | None = None
