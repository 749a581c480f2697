"""The state of peft adapters that can change without touching a weight.

``disable_adapter()``, ``set_adapter()``, ``merge_adapter()``/``unmerge_adapter()`` flip flags
on peft's tuner layers (any module with ``active_adapters``, ``merged_adapters`` and
``disable_adapters``, whether the model is a ``PeftModel`` or a transformers model with
adapters loaded). :func:`adapter_state` reads those flags; it is cheap (no tensor is read).
peft is not imported: modules are recognised by those attributes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from torch import nn

__all__ = ["AdapterState", "adapter_state", "state_bytes", "tuner_layers"]

AdapterState = tuple[tuple[str, bool, tuple[str, ...], tuple[str, ...]], ...]
"""Per tuner layer: (module name, adapters disabled, active adapters, merged adapters)."""

_TUNER_ATTRS = ("active_adapters", "merged_adapters", "disable_adapters")


def tuner_layers(model: nn.Module) -> tuple[tuple[str, nn.Module], ...]:
    """``(name, module)`` of every peft tuner layer in ``model``."""
    return tuple((name, m) for name, m in model.named_modules()
                 if all(hasattr(type(m), a) or hasattr(m, a) for a in _TUNER_ATTRS)
                 and hasattr(m, "base_layer"))


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence):
        return tuple(str(v) for v in value)
    return ()


def adapter_state(layers: Sequence[tuple[str, nn.Module]]) -> AdapterState:
    """The flags of each tuner layer (empty for a model without adapters)."""
    return tuple((name, bool(m.disable_adapters), _names(m.active_adapters),
                  _names(m.merged_adapters)) for name, m in layers)


def state_bytes(state: AdapterState) -> bytes:
    """A stable encoding of ``state`` for hashing."""
    return json.dumps(state).encode()
