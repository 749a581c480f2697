"""The fingerprint of the weights a model uses right now, checked cheaply at every request.

:class:`ModelFingerprint` hashes the full weights once (:class:`~.weights.WeightDigests`), then
:meth:`ModelFingerprint.current` reads, per request, each tensor's probe (identity, storage,
version) and the peft tuner layers' flags (:mod:`.adapters`), rehashing only what changed. The
fingerprint is a pure function of (config and tokenizer, every tensor's bytes, adapter flags):
it changes when the weights in use change and returns to its old value when they return (an
adapter enabled again, a weight restored), so stored K/V and answers are served again exactly
when they are valid again.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import torch

from .adapters import AdapterState, adapter_state, state_bytes, tuner_layers
from .static import static_digest
from .weights import WeightDigests

__all__ = ["FingerprintStats", "ModelFingerprint", "model_fingerprint"]


@dataclass
class FingerprintStats:
    """Cost and activity of one :class:`ModelFingerprint`.

    :ivar hash_s: seconds spent hashing weights (the first full hash included).
    :ivar checks: per-request checks made.
    :ivar changes: checks that found the fingerprint changed.
    :ivar tensors_rehashed: tensors hashed again after the first full hash.
    """

    hash_s: float = 0.0
    checks: int = 0
    changes: int = 0
    tensors_rehashed: int = 0


class ModelFingerprint:
    """The current fingerprint of ``model`` with ``tokenizer``.

    :param model: a transformers model (peft-wrapped or with adapters loaded, or not).
    :param tokenizer: its tokenizer (vocabulary and chat template are part of the identity).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any) -> None:
        self.model = model
        self.stats = FingerprintStats()
        t0 = time.perf_counter()
        self._static = static_digest(model, tokenizer)
        self._weights = WeightDigests(model)
        self.stats.hash_s += time.perf_counter() - t0
        self._layers = tuner_layers(model)
        self._adapters: AdapterState = adapter_state(self._layers)
        self._value = self._compose()

    @property
    def value(self) -> str:
        """The fingerprint as of the last check (hex)."""
        return self._value

    def current(self) -> str:
        """Check what can change in place and return the fingerprint (cheap when nothing did)."""
        self.stats.checks += 1
        t0 = time.perf_counter()
        before = self._weights.rehashed
        structure = self._weights.refresh()
        if structure:  # new or replaced tensors: adapters may have been added or injected
            self._layers = tuner_layers(self.model)
        adapters = adapter_state(self._layers)
        if adapters != self._adapters:
            merged = _merge_changed(self._adapters, adapters)
            if merged:  # a merge writes base weights through .data: hash those layers again
                self._weights.rehash(self._weights.names_under(merged))
            self._adapters = adapters
        self.stats.tensors_rehashed += self._weights.rehashed - before
        if self._weights.rehashed != before:
            self.stats.hash_s += time.perf_counter() - t0
        value = self._compose()
        if value != self._value:
            self.stats.changes += 1
            self._value = value
        return value

    def rehash(self) -> str:
        """Hash every tensor again (after writes through ``param.data``, which no probe sees)."""
        t0 = time.perf_counter()
        before = self._weights.rehashed
        self._weights.rehash([name for name, _ in self.model.named_parameters()]
                             + [name for name, _ in self.model.named_buffers()])
        self.stats.tensors_rehashed += self._weights.rehashed - before
        self.stats.hash_s += time.perf_counter() - t0
        return self.current()

    def _compose(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(self._static)
        h.update(self._weights.digest)
        h.update(state_bytes(self._adapters))
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"ModelFingerprint({self._value[:12]}, {self._weights!r})"


def _merge_changed(old: AdapterState, new: AdapterState) -> list[str]:
    """Tuner layers whose merged adapters differ between ``old`` and ``new``."""
    before = {name: merged for name, _, _, merged in old}
    return [name for name, _, _, merged in new if before.get(name, ()) != merged]


def model_fingerprint(model: torch.nn.Module, tokenizer: Any) -> str:
    """The fingerprint of ``model`` with ``tokenizer`` now (hashes every weight)."""
    return ModelFingerprint(model, tokenizer).value
