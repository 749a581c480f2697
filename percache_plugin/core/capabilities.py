"""What percache can do on one model (pure data)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Capabilities"]


@dataclass(frozen=True)
class Capabilities:
    """What percache can do on this model, and why not where it cannot.

    :ivar attention_hook: attention runs through the ``percache_attention`` hook.
    :ivar attention_backend: ``"sdpa"`` or ``"eager"`` (the default hook implementation).
    :ivar exact_reuse: exact-prefix K/V reuse (through a plain cache, so on every family).
    :ivar shifted_reuse: chunk reuse at new positions (RoPE phase shift).
    :ivar reasons: why a capability is off, keyed by its name.
    """

    model_type: str
    attention_hook: bool
    attention_backend: str
    exact_reuse: bool
    shifted_reuse: bool
    reasons: dict[str, str]

    def summary(self) -> str:
        parts = [f"model_type={self.model_type}", f"attention_hook={self.attention_hook}",
                 f"backend={self.attention_backend}", f"exact_reuse={self.exact_reuse}",
                 f"shifted_reuse={self.shifted_reuse}"]
        parts += [f"{k}: {v}" for k, v in self.reasons.items()]
        return "; ".join(parts)
