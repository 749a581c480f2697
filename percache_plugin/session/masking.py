"""The ``masked`` eviction mode's mask: a session's keep-vector, through ``percache_mask_function``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ..attention.masks import MaskFunction
from ..hooks.specs import hookimpl

__all__ = ["SessionKeepMask", "keep_mask_function"]


def keep_mask_function(keep: torch.Tensor) -> MaskFunction:
    """Slot ``kv`` is attended only where ``keep[kv]`` (slots past the vector: attended)."""
    n = keep.numel()

    def session_keep(batch_idx: Any, head_idx: Any, q_idx: Any, kv_idx: Any) -> Any:
        kv = torch.as_tensor(kv_idx)
        inside = kv < n
        return torch.where(inside, keep.to(kv.device)[kv.clamp(max=n - 1)], torch.ones_like(inside))

    return session_keep


class SessionKeepMask:
    """Registered once per handle; masks the slots of the session whose turn is running."""

    def __init__(self) -> None:
        self._fn: MaskFunction | None = None

    @contextlib.contextmanager
    def active(self, keep: torch.Tensor | None) -> Iterator[None]:
        self._fn = None if keep is None or bool(keep.all()) else keep_mask_function(keep)
        try:
            yield
        finally:
            self._fn = None

    @hookimpl
    def percache_mask_function(self, ctx: Any) -> MaskFunction | None:
        return self._fn
