"""Editing a live K/V cache: delete slots, shift a span's keys to new RoPE positions.

In a cache slot index == RoPE position. :meth:`CacheEditor.delete` removes slots (later slots
move down, their keys keep the phase of their old position); :meth:`CacheEditor.shift` rotates
a span's keys by ``delta`` positions with the model's :class:`~percache_plugin.attention.rope.RopeShifter`
(fp32, from the ``inv_freq`` snapshot). ``delete(span)`` followed by ``shift((start, n), -gap)``
is eviction with the gap closed. Every edit makes new tensors, so caches that share tensors
(forked sessions) are never changed behind each other's back. Values are never rotated.

Keys shifted this way are approximate for the positions after the edit (they still carry what
they attended to); callers report it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..attention.rope import NotShiftable, RopeShifter

__all__ = ["CacheEditor"]


class CacheEditor:
    """Edits one live cache (a ``DynamicCache`` of batch 1 with full K/V on every layer).

    :param cache: the cache to edit in place.
    :param shifter: the model's RoPE shifter (None: :meth:`shift` raises ``NotShiftable``).
    :param on_delete: called with the sorted slots just deleted, before they go (to keep what the
        slots stand for, e.g. a session's token ids, in step).
    :ivar edits: ``("delete", n)`` / ``("shift", start, end, delta)`` in the order applied.
    """

    def __init__(self, cache: Any, shifter: RopeShifter | None,
                 on_delete: Callable[[list[int]], None] | None = None, *, shift_reason: str = "") -> None:
        self.cache = cache
        self.shifter = shifter
        self.on_delete = on_delete
        self.shift_reason = shift_reason
        self.edits: list[tuple[Any, ...]] = []

    @property
    def n_slots(self) -> int:
        return int(self.cache.get_seq_length()) if self.cache.layers else 0

    def delete(self, positions: Sequence[int] | range) -> int:
        """Remove the slots ``positions`` from every layer; returns how many went.

        :raises IndexError: a position outside ``[0, n_slots)``."""
        n = self.n_slots
        gone = sorted(set(int(p) for p in positions))
        if not gone:
            return 0
        if gone[0] < 0 or gone[-1] >= n:
            raise IndexError(f"cannot delete slots {gone[0]}..{gone[-1]}: the cache holds {n}")
        if self.on_delete is not None:
            self.on_delete(gone)
        keep = torch.ones(n, dtype=torch.bool)
        keep[gone] = False
        for lay in self.cache.layers:
            idx = keep.to(lay.keys.device)
            lay.keys = lay.keys[..., idx, :]
            lay.values = lay.values[..., idx, :]
        self.edits.append(("delete", len(gone)))
        return len(gone)

    def shift(self, span: tuple[int, int], delta: int) -> None:
        """Rotate the keys of slots ``[start, end)`` by ``delta`` positions (values unchanged;
        a cache of MLA latents keeps the rotated part in its values, rotated instead).

        :raises NotShiftable: the model's RoPE cannot be shifted exactly (or it has none).
        :raises IndexError: the span is outside the cache."""
        start, end = span
        if self.shifter is None:
            raise NotShiftable(self.shift_reason or "this model's keys cannot be RoPE-shifted")
        if not 0 <= start <= end <= self.n_slots:
            raise IndexError(f"span {span} outside the cache's {self.n_slots} slots")
        if start == end or delta == 0:
            return
        slot = self.shifter.rope_slot  # "values" where the cache keeps MLA latents
        for i, lay in enumerate(self.cache.layers):
            old = getattr(lay, slot)
            moved = self.shifter.shift(old[..., start:end, :], i, int(delta))
            setattr(lay, slot, torch.cat([old[..., :start, :], moved, old[..., end:, :]], dim=-2))
        self.edits.append(("shift", start, end, int(delta)))

    def evict(self, start: int, end: int) -> None:
        """Delete slots ``[start, end)`` and shift every later key back by the gap."""
        n = self.n_slots
        self.delete(range(start, end))
        self.shift((start, n - (end - start)), -(end - start))
