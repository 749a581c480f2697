"""Plain prompts as token blocks: recycling the longest cached prefix of any earlier prompt.

A prompt (text or token ids) is cut into blocks of ``block`` tokens; each full block is a
reusable piece whose key chains the fingerprint, the key of the block before it and its own
ids (as vLLM's automatic prefix caching does), so two prompts share stored blocks exactly as
far as their ids agree, block by block. The last piece (the remainder, or the last block when
the prompt divides evenly) is never stored: at least one token is always computed. Blocks are
stored and evicted like any chunk node of the K/V store (atomic files, fingerprint, byte limit).

:func:`stored_prefix` finds, from the store alone, every node whose K/V holds a given run of ids
from position 0 on, whatever block size (or chunking) stored it: a node's key chains the
fingerprint, its parent and its own ids, so a node continues the run exactly when its key is
the key of the run's ids at its positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..segments import Prompt, Segment, SegmentError, chain_pieces, node_key
from .store import KVStore

__all__ = ["block_prompt", "plain_ids", "stored_prefix"]

_BLOCK = Segment("", "chunk")
_TAIL = Segment("", "query")


def block_prompt(ids: Sequence[int], block: int, fingerprint: str) -> Prompt:
    """The prompt of ``ids`` in blocks of ``block`` tokens plus a never-cached tail.

    :raises SegmentError: ``ids`` is empty."""
    ids = [int(t) for t in ids]
    if not ids:
        raise SegmentError("the prompt is empty")
    n_full = (len(ids) - 1) // block  # the tail keeps at least one token
    parts = [ids[i * block:(i + 1) * block] for i in range(n_full)]
    parts.append(ids[n_full * block:])
    return chain_pieces([_BLOCK] * n_full + [_TAIL], parts, fingerprint=fingerprint)


def plain_ids(tokenizer: Any, prompt: str | Sequence[int]) -> list[int]:
    """A plain prompt's ids: text tokenized with the tokenizer's special tokens and no chat
    template, or token ids as given.

    :raises TypeError: neither a str nor a sequence of ints."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if isinstance(prompt, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return [int(t) for t in prompt]
    raise TypeError(f"prompt must be a str or a sequence of token ids, got {type(prompt).__name__}")


def stored_prefix(store: KVStore, ids: Sequence[int], start: int = 0) -> list[str]:
    """Keys of the stored nodes that hold ``ids`` at their own positions, chained from the
    root (any block size), and reach past position ``start``; parents before children."""
    ids = [int(t) for t in ids]
    found: list[str] = []
    frontier: list[str | None] = [None]
    while frontier:
        parent = frontier.pop()
        for node in store.children(parent):
            end = node.start + node.n_tokens
            if end > len(ids) or node.key != node_key(store.fingerprint, parent, ids[node.start:end]):
                continue
            if end > start:
                found.append(node.key)
            frontier.append(node.key)
    return found
