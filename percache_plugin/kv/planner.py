"""Reuse plans: which stored nodes serve which part of a prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..segments import Prompt

if TYPE_CHECKING:
    from .store import KVStore

__all__ = ["ReusePlan", "longest_cached_prefix"]


@dataclass(frozen=True)
class ReusePlan:
    """Served pieces, by index into ``prompt.pieces``.

    :ivar exact: indices of the pieces served exactly; always a prefix ``0..n-1`` of the prompt.
    :ivar note: free text for the debug log (why this plan).
    """

    exact: tuple[int, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if self.exact != tuple(range(len(self.exact))):
            raise ValueError(f"exact reuse must cover a prefix of the pieces, got {self.exact}")


def longest_cached_prefix(prompt: Prompt, store: KVStore) -> ReusePlan:
    """Walk the chunk tree from the root while the store holds the next node (metadata only)."""
    served: list[int] = []
    for i, piece in enumerate(prompt.pieces):
        if piece.key is None or not store.contains(piece.key):
            break
        served.append(i)
    return ReusePlan(tuple(served), note=f"exact prefix of {len(served)} node(s)")
