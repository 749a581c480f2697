"""Where the weights of a model offloaded with accelerate live, for the fingerprint.

A module offloaded by accelerate (``dispatch_model`` with ``"disk"``/``"cpu"`` offload, or
:func:`~percache_plugin.buffer.offload.dispatch_buffered`) holds ``meta`` tensors between
forwards; its :class:`~accelerate.hooks.AlignDevicesHook` loads the real ones from its
``weights_map`` before each forward. Hashing the meta tensors (dtype and shape) would give two
models with different offloaded weights one fingerprint, and one model's stored K/V and answers
would be served to the other. :func:`offloaded_sources` finds, per tensor name, the mapping and
key the hook reads, so the fingerprint hashes the bytes the forward will use, and a probe that
stays the same across forwards (the hook replaces the meta tensors at every forward) but changes
when the source does: the file's version (inode, size, mtime, ctime) for a tensor read from a
file, the tensor's identity, storage and version for one held in RAM.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["OffloadedSource", "offloaded_sources"]


@dataclass(frozen=True)
class OffloadedSource:
    """The mapping an accelerate hook reads one offloaded tensor from, and its key there."""

    weights_map: Mapping[str, torch.Tensor]
    name: str

    def load(self, like: torch.Tensor) -> torch.Tensor:
        """The tensor the hook will load, in the dtype the module's tensor has (accelerate casts
        floating-point values to it)."""
        value = self.weights_map[self.name]
        if value.is_floating_point() and like.is_floating_point() and value.dtype != like.dtype:
            value = value.to(like.dtype)
        return value

    def probe(self) -> tuple[Any, ...]:
        """What changes when the loaded bytes may have; ``None`` entries mean "unknown": the
        tensor is hashed again at every check."""
        mapping: Any = self.weights_map
        key = self.name
        while hasattr(mapping, "dataset") and hasattr(mapping, "prefix"):  # accelerate's PrefixedDataset
            mapping, key = mapping.dataset, f"{mapping.prefix}{key}"
        path = _file_of(mapping, key)
        if path is not None:
            try:
                st = os.stat(path)
            except OSError:
                return ("missing", str(path))
            return ("file", str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        held = _held_tensor(mapping, key)
        if held is not None:
            return ("ram", id(held), held.data_ptr(), held._version)
        return ("unknown", object())  # never equal to a later probe


def _file_of(mapping: Any, key: str) -> Path | None:
    """The file a known loader reads ``key`` from (accelerate's ``OffloadedWeightsLoader``,
    percache's ``BufferedWeights``), or None."""
    state = getattr(mapping, "state_dict", None)
    if isinstance(state, Mapping) and key in state:
        return None
    index = getattr(mapping, "index", None)
    if not isinstance(index, Mapping) or key not in index:
        return None
    info = index[key]
    if isinstance(info, Mapping) and info.get("safetensors_file"):
        return Path(info["safetensors_file"])
    folder = getattr(mapping, "save_folder", None) or getattr(mapping, "folder", None)
    return None if folder is None else Path(folder) / f"{key}.dat"


def _held_tensor(mapping: Any, key: str) -> torch.Tensor | None:
    state = getattr(mapping, "state_dict", None)
    if isinstance(state, Mapping) and isinstance(state.get(key), torch.Tensor):
        return state[key]  # type: ignore[no-any-return]
    return None


def _hooks(module: torch.nn.Module) -> list[Any]:
    hook = getattr(module, "_hf_hook", None)
    if hook is None:
        return []
    return list(getattr(hook, "hooks", None) or [hook])  # accelerate's SequentialHook holds several


def offloaded_sources(model: torch.nn.Module) -> dict[str, OffloadedSource]:
    """Full tensor name -> where its accelerate hook loads it from, for every offloaded tensor
    of ``model`` (empty for a model without offload hooks)."""
    found: dict[str, OffloadedSource] = {}
    for module_name, module in model.named_modules():
        for hook in _hooks(module):
            weights_map = getattr(hook, "weights_map", None)
            if not getattr(hook, "offload", False) or weights_map is None:
                continue
            recurse = bool(getattr(hook, "place_submodules", False))
            tensors = [*module.named_parameters(recurse=recurse)]
            if getattr(hook, "offload_buffers", False):
                tensors += [*module.named_buffers(recurse=recurse)]
            for name, _ in tensors:
                full = f"{module_name}.{name}" if module_name else name
                found[full] = OffloadedSource(weights_map, name)
    return found
