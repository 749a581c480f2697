"""What percache can do on a model once the attention switch is installed, and why not."""

from __future__ import annotations

from typing import Any

from ..core.capabilities import Capabilities
from .backend import AttentionSwitch
from .rope import RopeShifter

__all__ = ["capabilities_of", "usable_shifter"]


def usable_shifter(switch: AttentionSwitch, rope: tuple[RopeShifter | None, str]) -> tuple[
        RopeShifter | None, str]:
    """The RoPE shifter when shifted reuse can run here (it needs the splice masks of the hook)."""
    if not switch.active:
        return None, "needs the attention hook (splice masks): " + switch.reason
    return rope


def capabilities_of(model: Any, switch: AttentionSwitch, shifter: RopeShifter | None,
                    shift_reason: str) -> Capabilities:
    reasons: dict[str, str] = {}
    if not switch.active:
        reasons["attention_hook"] = switch.reason
    if shift_reason:
        reasons["shifted_reuse"] = shift_reason
    return Capabilities(
        model_type=str(getattr(model.config, "model_type", "unknown")),
        attention_hook=switch.active,
        attention_backend=switch.backend,
        exact_reuse=True,
        shifted_reuse=shifter is not None,
        reasons=reasons,
    )
