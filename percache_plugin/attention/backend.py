"""Registers the percache attention (and mask) function and switches a model to it.

transformers looks attention functions up by name in a process-wide registry that has no
unregister. percache registers two names, once per process whatever the number of handles:
``percache_sdpa`` and ``percache_eager`` (the mask function differs). The registered function
dispatches on the attention module it is called for: :func:`install` maps every module of a
model to its handle's relay (held weakly), :func:`release` drops the mapping when the handle
closes, so two models enabled in one process never share hooks. One model has at most one open
handle (:func:`check_free`): a second one would take the modules' relay over.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

from .hf_private import attn_implementation, can_set_attn_implementation, supports_sdpa
from .masks import with_extras

__all__ = ["AttentionSwitch", "check_free", "install", "uninstall", "release", "PREFIX", "NAMES"]

PREFIX = "percache"
NAMES: dict[str, str] = {"sdpa": f"{PREFIX}_sdpa", "eager": f"{PREFIX}_eager"}

Relay = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]

# The one piece of process state: attention module -> its handle's relay (both weak). It
# mirrors transformers' own process-wide registry, which maps names, not modules.
_RELAYS: weakref.WeakKeyDictionary[torch.nn.Module, weakref.ref[Relay]] = weakref.WeakKeyDictionary()


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


def percache_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The registered attention function: calls the relay of the handle ``module`` belongs to."""
    ref = _RELAYS.get(module)
    target = ref() if ref is not None else None
    if target is None:
        raise RuntimeError(
            f"{type(module).__name__} runs percache attention but belongs to no open percache "
            "handle (closed or garbage-collected)")
    return target(module, query, key, value, attention_mask, **kwargs)


def _ref(relay: Relay) -> weakref.ref[Relay]:
    return weakref.WeakMethod(relay) if hasattr(relay, "__self__") else weakref.ref(relay)  # type: ignore[arg-type]


def _attached(model: Any) -> bool:
    return any((ref := _RELAYS.get(m)) is not None and ref() is not None for m in model.modules())


def check_free(model: Any) -> None:
    """Refuse ``model`` while an open handle's relay serves its attention modules: a second
    handle would route the first one's attention (its splices and masks) into its own hooks, and
    closing either would lift the other's. A handle dropped without ``close()`` frees the model
    once it is garbage-collected (collected here first).

    :raises RuntimeError: the model has an open handle."""
    if _attached(model):
        gc.collect()
        if _attached(model):
            raise RuntimeError(
                f"this {type(model).__name__} already has an open percache handle: close() it "
                "before enable() again (pc.disabled() runs the model without percache for a while)")


def _current(model: torch.nn.Module) -> str:
    return attn_implementation(model)


def install(model: Any, relay: Relay) -> AttentionSwitch:
    """Route ``model``'s attention modules to ``relay`` and switch the model to the percache
    attention function (registered under its fixed name; registering again is a no-op
    replacement with the same function); verify it took."""
    previous = _current(model)
    backend = "sdpa" if supports_sdpa(model) else "eager"
    name = NAMES[backend]
    AttentionInterface.register(name, percache_attention_forward)
    # Without a mask function of the same name every layer silently receives mask=None.
    # The mask function ANDs in the extra mask of the model's handle (percache_mask_function).
    AttentionMaskInterface.register(name, with_extras(sdpa_mask if backend == "sdpa" else eager_mask))
    ref = _ref(relay)
    for module in model.modules():
        _RELAYS[module] = ref
    if not can_set_attn_implementation(model):
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


def release(model: Any, relay: Relay) -> None:
    """Forget ``model``'s modules that route to ``relay`` (the handle closes)."""
    for module in model.modules():
        ref = _RELAYS.get(module)
        if ref is not None and ref() == relay:
            del _RELAYS[module]
