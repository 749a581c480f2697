"""Whether position-shifted reuse should hold on a model, and why not.

A model may legitimately not support shifting (learned positions, ALiBi, dynamic NTK, no
attention hook): its shifted checks are *not applicable*. A profile that says "RoPE" but
contradicts the model's rotary module (wrong rotary dims, ...) is a *failure*: the user
described the family wrongly, and reuse built on it would be wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from ..attention.profile import ModelProfile, resolve_profile, rotary_modules, text_config
from ..attention.rope import ROPE_TYPES, NotShiftable, RopeShifter
from ..attention.rope_verify import NOT_SHIFTABLE, LayoutUnverified, verified_shifter
from ..hooks.manager import Hooks, make_plugin_manager
from .result import Outcome, failed, not_applicable
from .subject import Subject

__all__ = ["suite_profile", "shift_limitation", "build_shifter", "shift_gate"]


def suite_profile(subject: Subject) -> ModelProfile | None:
    """The ``percache_model_profile`` answer of the suite's plugins and the installed
    entry-point plugins (what a handle opened by the suite sees), or None for the table."""
    pm = make_plugin_manager()
    for plugin in subject.options.plugins:
        pm.register(plugin)
    profile = Hooks(pm).model_profile(subject.model)
    if profile is not None and not isinstance(profile, ModelProfile):
        raise TypeError(f"percache_model_profile returned {type(profile).__name__}, "
                        "expected a ModelProfile")
    return profile


def _rope_sets(config: Any) -> dict[str, Mapping[str, Any]]:
    params = getattr(config, "rope_parameters", None) or {}
    nested = {k: v for k, v in params.items() if isinstance(v, Mapping)}
    return nested or {"shared": params}


def shift_limitation(model: nn.Module, profile: ModelProfile | None) -> str:
    """Why shifting legitimately does not apply to ``model`` ("" when it should apply)."""
    model_type = text_config(model).model_type
    if profile is None and model_type in NOT_SHIFTABLE:
        return f"{model_type}: {NOT_SHIFTABLE[model_type]}"
    try:
        resolved = resolve_profile(model, profile)
    except ValueError as exc:
        return str(exc)
    name = resolved.model_type
    if resolved.positions != "rope":
        return (f"{name}: positions are {resolved.positions!r}, not RoPE "
                f"({resolved.notes or 'no rotary phase'}); keys are reusable only where computed")
    if not rotary_modules(model):
        return f"{name}: no rotary module with an inv_freq buffer ({resolved.notes or 'RoPE table'})"
    for key, params in _rope_sets(text_config(model)).items():
        rope_type = params.get("rope_type")
        if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
            return f"{name}: unknown rope_type {rope_type!r} for RoPE set {key!r}"
        reason = ROPE_TYPES[rope_type]
        if reason is not None:
            return f"{name}: rope_type {rope_type!r}: {reason}"
    return ""


def build_shifter(model: nn.Module, profile: ModelProfile | None) -> RopeShifter | Outcome:
    """A shifter for ``model``, or the outcome to report: not applicable (a limitation) or
    failed (a profile that contradicts the model)."""
    try:
        return verified_shifter(model, profile)
    except LayoutUnverified as exc:  # measured: no layout reproduces the model's keys
        return not_applicable(exc.reason)
    except NotShiftable as exc:
        limitation = shift_limitation(model, profile)
        if limitation:
            return not_applicable(limitation)
        source = "the plugin's profile" if profile is not None else "the built-in profile"
        return failed(f"{source} contradicts the model: {exc.reason}")


def _layout(shifter: RopeShifter | None) -> tuple[Any, ...] | None:
    if shifter is None:
        return None
    return (shifter.model_type, shifter.rotary_dims, shifter.rotate, shifter.layer_rope,
            shifter.rope_slot)


def shift_gate(subject: Subject, pc: Any) -> Outcome | None:
    """None when the handle ``pc`` should do shifted reuse and uses the right RoPE layout;
    otherwise the outcome to report instead of running a shifted check."""
    caps = pc.capabilities
    if not caps.attention_hook:
        return not_applicable("shifted reuse needs the attention hook (splice masks): "
                              + caps.reasons.get("attention_hook", ""))
    profile = pc.hooks.model_profile(subject.model)
    expected = build_shifter(subject.model, profile)
    if isinstance(expected, Outcome):
        return expected
    if _layout(pc.shifter) != _layout(expected):
        engine = caps.reasons.get("shifted_reuse") or f"layout {_layout(pc.shifter)}"
        return failed(
            f"the engine's RoPE shifter ({engine}) ignores the percache_model_profile of the "
            f"plugins given to the suite (layout {_layout(expected)}); the engine reads profiles "
            "when enable() builds the handle: pass the plugin as enable(..., plugins=[...]) or "
            "register it through the 'percache' entry-point group")
    return None
