"""Registers the percache attention (and mask) function and switches a model to it.

transformers looks attention functions up by name in a library-wide registry. Each handle
registers its own name (``percache_<id>``), bound to its relay, so two models enabled in one
process never share hooks. The registered function holds the relay weakly: after ``disable()``
the name stays registered (transformers has no unregister) but points at nothing.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

__all__ = ["AttentionSwitch", "install", "uninstall", "PREFIX"]

PREFIX = "percache"

Relay = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


@dataclass(frozen=True)
class AttentionSwitch:
    """The outcome of :func:`install`.

    :ivar name: the registered attention name (``percache_<id>``).
    :ivar previous: the model's attention implementation before the switch (restored on uninstall).
    :ivar active: whether the model now routes attention through the relay.
    :ivar backend: ``"sdpa"`` or ``"eager"`` (the function the default plugin calls).
    :ivar reason: why the switch did not take, when it did not.
    """

    name: str
    previous: str
    active: bool
    backend: str
    reason: str = ""


def _weak_relay(relay: Relay) -> Relay:
    ref = weakref.WeakMethod(relay) if hasattr(relay, "__self__") else weakref.ref(relay)

    def percache_attention_forward(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        target = ref()
        if target is None:
            raise RuntimeError("this percache handle was disabled or garbage-collected")
        return target(module, query, key, value, attention_mask, **kwargs)

    return percache_attention_forward


def _current(model: torch.nn.Module) -> str:
    return str(model.config._attn_implementation)


def install(model: Any, relay: Relay) -> AttentionSwitch:
    """Register ``relay`` under a fresh name and switch ``model`` to it; verify it took."""
    previous = _current(model)
    backend = "sdpa" if getattr(model, "_supports_sdpa", False) else "eager"
    name = f"{PREFIX}_{uuid.uuid4().hex[:12]}"
    AttentionInterface.register(name, _weak_relay(relay))
    # Without a mask function of the same name every layer silently receives mask=None.
    AttentionMaskInterface.register(name, sdpa_mask if backend == "sdpa" else eager_mask)
    if not model._can_set_attn_implementation():
        return AttentionSwitch(
            name, previous, False, backend,
            reason=f"{type(model).__name__} does not route attention through AttentionInterface",
        )
    try:
        model.set_attn_implementation(name)
    except (ValueError, KeyError, ImportError) as exc:
        return AttentionSwitch(name, previous, False, backend, reason=f"switch refused: {exc}")
    if _current(model) != name:
        return AttentionSwitch(
            name, previous, False, backend,
            reason=f"switch had no effect (still {_current(model)!r})",
        )
    return AttentionSwitch(name, previous, True, backend)


def uninstall(model: Any, switch: AttentionSwitch) -> None:
    """Put the model back on its previous implementation."""
    if switch.active and _current(model) != switch.previous:
        model.set_attn_implementation(switch.previous)
    if _current(model) != switch.previous:
        raise RuntimeError(
            f"could not restore attention implementation {switch.previous!r} (now {_current(model)!r})"
        )
