"""One K/V store per model fingerprint under one store path (the key follows the weights in use)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..config import Config
from .eviction import BUILTIN_POLICIES, EvictionPolicy
from .store import KVStore, stored_fingerprints

__all__ = ["FingerprintStores"]


class FingerprintStores:
    """Opens a :class:`KVStore` per fingerprint on first use and applies settings to all.

    :param policies: eviction policies by name (the handle's registry); ``Config.kv_eviction``
        names one.
    """

    def __init__(self, path: Path | None,
                 policies: Mapping[str, EvictionPolicy] = BUILTIN_POLICIES) -> None:
        self._path = path
        self._policies = policies
        self._stores: dict[str, KVStore] = {}

    def get(self, fingerprint: str, config: Config) -> KVStore:
        if fingerprint not in self._stores:
            self._stores[fingerprint] = KVStore(
                self._path, fingerprint=fingerprint, byte_limit=config.kv_byte_limit,
                storage_dtype=config.torch_storage_dtype, verify=config.verify_checksums,
                eviction=self._policies[config.kv_eviction])
        return self._stores[fingerprint]

    def every(self, first: str, config: Config) -> list[KVStore]:
        """The stores of ``first`` and of every other fingerprint with K/V under the path."""
        others = [] if self._path is None else [fp for fp in stored_fingerprints(self._path) if fp != first]
        return [self.get(fp, config) for fp in (first, *others)]

    def configure(self, config: Config, changed: set[str]) -> None:
        """A new byte limit evicts at once; dtype and checksum settings apply to the next I/O."""
        for store in self._stores.values():
            if "kv_eviction" in changed:
                store.eviction = self._policies[config.kv_eviction]
            if "kv_byte_limit" in changed or "kv_eviction" in changed:
                store.set_byte_limit(config.kv_byte_limit)
            if "storage_dtype" in changed:
                store.storage_dtype = config.torch_storage_dtype
            if "verify_checksums" in changed:
                store.verify = config.verify_checksums

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
