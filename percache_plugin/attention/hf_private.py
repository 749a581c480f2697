"""The only private transformers attributes percache reads, each wrapped here once.

transformers 5 has no public way to ask a model which attention implementation it runs,
whether it can switch implementation, or whether it supports sdpa. These three reads go
through this module only; :func:`check` verifies they still exist and have the expected types,
and the conformance suite (``attention_switch``) and ``tests/attention/test_hf_private.py``
call it, so a transformers release that renames them fails loudly instead of silently
switching percache off.
"""

from __future__ import annotations

from typing import Any

__all__ = ["attn_implementation", "can_set_attn_implementation", "supports_sdpa", "check"]


def attn_implementation(model: Any) -> str:
    """The attention implementation the model runs now (``config._attn_implementation``)."""
    return str(model.config._attn_implementation)


def can_set_attn_implementation(model: Any) -> bool:
    """Whether ``set_attn_implementation`` can route the model's attention through
    ``AttentionInterface`` (``PreTrainedModel._can_set_attn_implementation``)."""
    return bool(model._can_set_attn_implementation())


def supports_sdpa(model: Any) -> bool:
    """Whether the family supports sdpa (``PreTrainedModel._supports_sdpa``)."""
    return bool(getattr(model, "_supports_sdpa", False))


def check(model: Any) -> list[str]:
    """What no longer holds of the private attributes above on ``model`` (empty: all fine)."""
    problems = []
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if not isinstance(impl, str):
        problems.append(f"config._attn_implementation is {type(impl).__name__}, expected str")
    can = getattr(model, "_can_set_attn_implementation", None)
    if not callable(can):
        problems.append("PreTrainedModel._can_set_attn_implementation() is gone")
    elif not isinstance(can(), bool):
        problems.append("PreTrainedModel._can_set_attn_implementation() no longer returns a bool")
    if not hasattr(model, "_supports_sdpa"):
        problems.append("PreTrainedModel._supports_sdpa is gone")
    return problems
