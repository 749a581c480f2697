"""Output memory for joining chunk K/V, reused from one request to the next when nobody else
references it.

The first forward over a cache built from chunks concatenates each layer's chunks with its new
tokens (:class:`~.cache.DeferredLayer`): one output tensor per layer and per keys/values, the
size of the whole cached prefix (93 MB for 2,000 tokens of SmolLM2-135M in fp32). A fresh
allocation that size usually lands on pages the C allocator has just given back to the OS (glibc
gives freed memory at the top of its heap back), and the first write to each page faults: 4k to
14k minor faults per request measured in ``bench ttft``, which the in-memory ceiling does not
pay. :class:`JoinBuffers` keeps that output memory between requests and lends it again, so a
request writes the joined prefix into pages already mapped.

Memory is lent only when nothing outside this object references it: the lender checks, before
every reuse, that the storage's reference count (tensors and views on it, the Python storage
object, NumPy arrays and DLPack capsules made from them) is what it was right after the
allocation, when only the lender held it. A cache that is still alive (a session kept it, the
caller holds it, a view of it was cut by ``crop``) keeps its memory: the lender allocates new
memory instead, and drops its own reference to the old one. Where torch does not expose the
count, nothing is reused (``reuse_supported`` is False). The memory held is reported
(:attr:`JoinBuffers.nbytes`) and bounded by one joined prefix, with ``headroom`` to spare for a
slightly longer prompt.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["JoinBuffers", "JoinStats", "storage_use_count"]


def _use_count_fn() -> Callable[[int], int] | None:
    fn = getattr(torch._C, "_storage_Use_Count", None)
    return fn if callable(fn) else None


def storage_use_count(t: torch.Tensor) -> tuple[int, int] | None:
    """References to ``t``'s storage: (torch's count of owners of the storage, Python references
    to its storage object), both as seen from inside this call; None where torch does not
    expose the first."""
    fn = _use_count_fn()
    if fn is None:
        return None
    st = t.untyped_storage()
    return int(fn(st._cdata)), sys.getrefcount(st)


@dataclass
class JoinStats:
    """How often the lender reused memory and how often it had to allocate.

    :ivar reuses: lends of memory already held (no fresh pages).
    :ivar allocations: fresh allocations (first use, a longer prefix, another dtype or device).
    :ivar busy: fresh allocations because the memory held was still referenced elsewhere.
    """

    reuses: int = 0
    allocations: int = 0
    busy: int = 0


@dataclass
class _Held:
    flat: torch.Tensor
    alone: tuple[int, int]


class JoinBuffers:
    """One reusable flat buffer per slot (a layer's keys or values).

    :param headroom: extra share of elements allocated beyond the first need, so that a prompt
        a little longer than the last still fits.
    """

    def __init__(self, headroom: float = 0.125) -> None:
        if not headroom >= 0:
            raise ValueError(f"headroom must be >= 0, got {headroom!r}")
        self.headroom = headroom
        self.stats = JoinStats()
        self._held: dict[Hashable, _Held] = {}
        self._lock = threading.Lock()  # the check and the lend are one step for each caller

    @property
    def reuse_supported(self) -> bool:
        """Whether this torch exposes the storage reference count that a reuse is checked with."""
        return _use_count_fn() is not None

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        with self._lock:
            return sum(h.flat.numel() * h.flat.element_size() for h in self._held.values())

    def take(self, slot: Hashable, shape: Sequence[int], dtype: torch.dtype,
             device: torch.device) -> torch.Tensor:
        """A contiguous tensor of ``shape`` to write into (contents undefined), made of the
        memory held for ``slot`` when nobody else references it and it is large enough, else of
        new memory (then held for ``slot`` instead). The memory is never an inference tensor,
        so a take outside inference mode may write memory first taken inside it."""
        with self._lock:
            return self._take(slot, shape, dtype, device)

    def _take(self, slot: Hashable, shape: Sequence[int], dtype: torch.dtype,
              device: torch.device) -> torch.Tensor:
        n = math.prod(shape)
        held = self._held.get(slot)
        if held is not None and held.flat.dtype == dtype and held.flat.device == device \
                and held.flat.numel() >= n:
            if self._alone(held):
                self.stats.reuses += 1
                return held.flat[:n].view(*shape)
            self.stats.busy += 1
        self._held.pop(slot, None)  # whoever still uses the old memory keeps it alive
        with torch.inference_mode(False):  # a normal tensor: writable in and out of inference mode
            flat = torch.empty(max(n, int(n * (1 + self.headroom))), dtype=dtype, device=device)
        alone = storage_use_count(flat)
        if alone is not None:
            self._held[slot] = _Held(flat, alone)
        self.stats.allocations += 1
        return flat[:n].view(*shape)

    @staticmethod
    def _alone(held: _Held) -> bool:
        return storage_use_count(held.flat) == held.alone

    def clear(self) -> None:
        """Drop every reference held (the memory goes when its last user lets it go)."""
        with self._lock:
            self._held.clear()
