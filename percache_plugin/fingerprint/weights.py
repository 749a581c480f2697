"""Full-weight digests, per tensor, with a cheap probe of what changed in place.

Every parameter and buffer is hashed from its raw bytes (blake2b) once; afterwards
:meth:`WeightDigests.refresh` reads only each tensor's identity, storage pointer and autograd
version counter and rehashes the tensors whose probe changed (a ``set_adapter``, an optimizer
step, ``p.add_()`` under ``no_grad``, ``p.copy_()``, a replaced ``Parameter``, new adapter
weights). Writes through ``p.data`` bypass the version counter and are invisible to the probe
(as are in-place writes to tensors made under inference mode larger than
:data:`INFERENCE_PROBE_BYTES`, which have none);
:meth:`WeightDigests.rehash` (``PerCache.refresh_fingerprint()``) hashes everything again.
A tensor offloaded with accelerate (``meta`` between forwards) is hashed from the bytes its hook
loads and probed by their source (:mod:`.offloaded`), so its digest is the one the same tensor
has in RAM.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from .offloaded import OffloadedSource, offloaded_sources

__all__ = ["INFERENCE_PROBE_BYTES", "WeightDigests", "named_tensors", "tensor_digest"]

Probe = tuple[Any, ...]


def named_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter and buffer of ``model`` once (tied tensors under their first name)."""
    seen: set[int] = set()
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            yield name, t


def tensor_digest(t: torch.Tensor) -> bytes:
    """blake2b of dtype, shape and raw bytes (meta tensors: dtype and shape only)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.device.type != "meta" and t.numel():
        data = t.detach().reshape(-1)
        if data.device.type != "cpu":
            data = data.cpu()
        h.update(data.contiguous().view(torch.uint8).numpy().data)
    return h.digest()


INFERENCE_PROBE_BYTES = 1 << 16
"""Tensors made under ``torch.inference_mode()`` (a model loaded in it; a dynamic-NTK
``inv_freq`` recomputed in it) have no version counter: up to this size their probe holds
their digest, so an in-place write (allowed only under inference mode) is seen; larger ones are
probed by identity and storage only, like a write through ``p.data``."""


def _probe(t: torch.Tensor, source: OffloadedSource | None) -> Probe:
    if t.device.type == "meta" and source is not None:
        return source.probe()  # the hook puts a new meta tensor in place at every forward
    if t.device.type == "meta":  # no bytes; one made under inference mode has no version counter
        return id(t), 0, 0
    if t.is_inference():
        small = t.numel() * t.element_size() <= INFERENCE_PROBE_BYTES
        return id(t), t.data_ptr(), tensor_digest(t) if small else None
    return id(t), t.data_ptr(), t._version


def _sources(model: torch.nn.Module, tensors: Iterable[torch.Tensor]) -> dict[str, OffloadedSource]:
    """The offloaded tensors' sources; only a model with meta tensors can have any (this spares
    the others a walk of every module at every request)."""
    return offloaded_sources(model) if any(t.device.type == "meta" for t in tensors) else {}


def _digest(t: torch.Tensor, source: OffloadedSource | None) -> bytes:
    return tensor_digest(source.load(t) if t.device.type == "meta" and source is not None else t)


class WeightDigests:
    """Per-tensor digests of one model and the probes they were taken at.

    :ivar rehashed: tensors hashed again after the first full hash (a count, for stats).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._digests: dict[str, bytes] = {}
        self._probes: dict[str, Probe] = {}
        self._combined = b""
        self.rehashed = 0
        self.rehash()

    @property
    def digest(self) -> bytes:
        """The combined digest of every tensor, by name."""
        return self._combined

    def rehash(self, names: Iterable[str] | None = None) -> None:
        """Hash ``names`` again (None: every tensor) and recombine."""
        wanted = None if names is None else set(names)
        with torch.no_grad():
            tensors = dict(named_tensors(self.model))
            sources = _sources(self.model, tensors.values())
            for name, t in tensors.items():
                if wanted is None or name in wanted or name not in self._digests:
                    source = sources.get(name)
                    self._probes[name] = _probe(t, source)  # before the read: a later write shows
                    self._digests[name] = _digest(t, source)
                    if wanted is not None:
                        self.rehashed += 1
            for gone in set(self._digests) - set(tensors):
                del self._digests[gone], self._probes[gone]
        self._combine()

    def refresh(self) -> bool:
        """Rehash the tensors whose probe changed since they were hashed; whether any did."""
        tensors = dict(named_tensors(self.model))
        sources = _sources(self.model, tensors.values())
        current = {name: _probe(t, sources.get(name)) for name, t in tensors.items()}
        if current == self._probes:
            return False
        changed = [n for n, p in current.items() if self._probes.get(n) != p]
        changed += [n for n in self._probes if n not in current]
        self.rehash(changed)
        return True

    def names_under(self, prefixes: Iterable[str]) -> list[str]:
        """Tensor names inside the modules named by ``prefixes``."""
        pre = tuple(p + "." for p in prefixes)
        return [n for n in self._digests if n.startswith(pre)] if pre else []

    def _combine(self) -> None:
        h = hashlib.blake2b(digest_size=16)
        for name in sorted(self._digests):
            h.update(name.encode() + b"\0")
            h.update(self._digests[name])
        self._combined = h.digest()

    def __repr__(self) -> str:
        return f"WeightDigests({len(self._digests)} tensors, {self._combined.hex()[:12]})"
