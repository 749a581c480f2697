"""Throwaway plugins that break percache on purpose: the suite must catch each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safetensors import safe_open
from safetensors.torch import save

import percache_plugin as percache
from percache_plugin.attention.profile import ModelProfile

__all__ = ["WrongRotaryDims", "WrongLayout", "FlipStoredTensor", "flip_first_key"]


class WrongRotaryDims:
    """Claims half the rotary dims the model really rotates."""

    def __init__(self, rotary_dims: int) -> None:
        self.rotary_dims = rotary_dims

    @percache.hookimpl
    def percache_model_profile(self, model: Any) -> ModelProfile:
        return ModelProfile(model.config.model_type, "rope", rotary_dims=self.rotary_dims)


class WrongLayout:
    """Right dims, wrong pairing of the rotary dims (interleaved instead of rotate-half)."""

    @percache.hookimpl
    def percache_model_profile(self, model: Any) -> ModelProfile:
        return ModelProfile(model.config.model_type, "rope", rotate="interleaved")


def flip_first_key(path: Path) -> None:
    """Negate the first key tensor of a node file, keeping names, shapes and metadata."""
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    first = sorted(n for n in tensors if n.startswith("k."))[0]
    tensors[first] = -tensors[first]
    path.write_bytes(save(tensors, metadata=metadata))


class FlipStoredTensor:
    """A broken store: right after each node file is written, one of its tensors is flipped."""

    def __init__(self) -> None:
        self.flipped: list[Path] = []

    @percache.hookimpl(wrapper=True)
    def percache_store_chunk(self, ctx: Any, key: str, piece: Any, parent: Any, kv: Any,
                             exact: bool) -> Any:
        result = yield
        if ctx.store.path is not None:
            for path in Path(ctx.store.path, "kv").rglob(f"{key}.safetensors"):
                flip_first_key(path)
                self.flipped.append(path)
        return result
