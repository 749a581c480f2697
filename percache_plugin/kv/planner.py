"""Reuse plans: which stored nodes serve which part of a prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..segments import Prompt

if TYPE_CHECKING:
    from .store import KVStore

__all__ = ["SCOPE_EXTRA", "ReusePlan", "ShiftedPiece", "longest_cached_prefix", "plan_shifted", "scope_tag"]

SCOPE_EXTRA = "scope"
"""The ``NodeInfo.extra`` field naming the scope of the prompt that stored a node (absent: unscoped)."""


@dataclass(frozen=True)
class ShiftedPiece:
    """A prompt piece served by a stored instance of the same tokens computed elsewhere.

    :ivar index: the piece's index in ``prompt.pieces``.
    :ivar key: the store key of the node holding its K/V.
    :ivar source_start: the position that node was computed at (the shift is ``start - source_start``).
    """

    index: int
    key: str
    source_start: int


@dataclass(frozen=True)
class ReusePlan:
    """Served pieces, by index into ``prompt.pieces``.

    :ivar exact: indices of the pieces served exactly; always a prefix ``0..n-1`` of the prompt.
    :ivar shifted: pieces after the exact prefix served from another position (approximate).
    :ivar note: free text for the debug log (why this plan).
    """

    exact: tuple[int, ...] = ()
    shifted: tuple[ShiftedPiece, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if self.exact != tuple(range(len(self.exact))):
            raise ValueError(f"exact reuse must cover a prefix of the pieces, got {self.exact}")
        idx = [s.index for s in self.shifted]
        if idx != sorted(set(idx)) or (idx and idx[0] < len(self.exact)):
            raise ValueError(f"shifted pieces must be unique, sorted and after the exact prefix, got {idx}")


def longest_cached_prefix(prompt: Prompt, store: KVStore) -> ReusePlan:
    """Walk the chunk tree from the root while the store holds the next node (metadata only)."""
    served: list[int] = []
    for i, piece in enumerate(prompt.pieces):
        if piece.key is None or not store.contains(piece.key):
            break
        served.append(i)
    return ReusePlan(tuple(served), note=f"exact prefix of {len(served)} node(s)")


def plan_shifted(prompt: Prompt, store: KVStore, exact: ReusePlan) -> ReusePlan:
    """After the exact prefix, serve every reusable piece whose tokens the store holds anywhere a
    prompt of the same scope stored them (``Prompt.scope``, :func:`scope_tag`), choosing the
    stored instance closest in position (then the most used)."""
    shifted = []
    for i in range(len(exact.exact), len(prompt.pieces)):
        piece = prompt.pieces[i]
        if not piece.segment.reusable:
            continue
        # by its ids alone, but only what a prompt of the same scope stored: another scope's
        # copy would tell this one (in its reused tokens) that that scope holds the same text
        found = [n for n in store.find_by_tokens(piece.token_ids) if n.extra.get(SCOPE_EXTRA) == prompt.scope]
        if found:
            best = min(found, key=lambda n: (abs(n.start - piece.start), -n.hits))
            shifted.append(ShiftedPiece(i, best.key, best.start))
    note = f"{exact.note}; {len(shifted)} shifted chunk(s)"
    return ReusePlan(exact.exact, tuple(shifted), note)


def scope_tag(scope: str | None) -> dict[str, str]:
    """The ``extra`` a scoped prompt's nodes are stored with: what :func:`plan_shifted` matches."""
    return {} if scope is None else {SCOPE_EXTRA: scope}
