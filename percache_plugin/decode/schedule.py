"""How many tokens to draft: grow on acceptance, shrink on rejection, pause after misses.

Like transformers' ``"heuristic"`` schedule for assistant models (``+2`` when every draft token
was accepted, ``-1`` otherwise), plus a back-off: after ``patience`` drafts in a row of which
nothing was accepted, proposing pauses for ``cooldown`` tokens, doubling on each pause, so an
answer with nothing to copy costs a lookup per token and little else.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DraftSchedule"]


@dataclass
class DraftSchedule:
    """Draft length state of one request.

    :ivar length: tokens to propose next.
    """

    length: int = 4
    max_length: int = 16
    patience: int = 2
    cooldown: int = 4
    _misses: int = 0
    _paused: int = 0
    _next_cooldown: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.length <= self.max_length:
            raise ValueError(f"need 1 <= length <= max_length, got {self.length}, {self.max_length}")
        if self.patience < 1 or self.cooldown < 0:
            raise ValueError("patience must be >= 1 and cooldown >= 0")
        self._next_cooldown = self.cooldown

    def budget(self) -> int:
        """Tokens to propose for the next forward (0 while paused)."""
        return 0 if self._paused > 0 else self.length

    def tick(self, emitted: int) -> None:
        """``emitted`` tokens came out of a forward (a pause counts down by tokens)."""
        self._paused = max(0, self._paused - emitted)

    def update(self, proposed: int, accepted: int) -> None:
        """A draft of ``proposed`` tokens was verified; its first ``accepted`` were right."""
        if proposed <= 0:
            return
        if accepted == proposed:
            self.length = min(self.max_length, self.length + 2)
        else:
            self.length = max(1, self.length - 1)
        if accepted == 0:
            self._misses += 1
            if self._misses >= self.patience:
                self._paused = self._next_cooldown
                self._next_cooldown *= 2
                self._misses = 0
        else:
            self._misses = 0
            self._next_cooldown = self.cooldown
