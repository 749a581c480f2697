"""What the K/V store holds and reports: a chunk's K/V, a node's metadata, counters."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import torch

from .integrity import hash_token_ids, validate_key

if TYPE_CHECKING:
    from .layer_read import LayerGate

__all__ = ["ChunkKV", "NodeInfo", "StoreStats", "check_limit", "check_node", "node_info", "plain"]


@dataclass(frozen=True)
class ChunkKV:
    """K/V of one chunk: per layer ``[kv_heads, n_tokens, head_dim]`` (post-RoPE, no batch).

    ``origin`` says where a loader found it, for the request's stats: ``"ram"`` (served by the
    RAM tier), ``"store"`` (read from the store by the RAM tier on a miss) or ``""`` (not said).
    It takes no part in equality, nor does ``row``: the store row the tensors were read with
    (:meth:`~.store.KVStore.get`; None from other loaders), which says where they were computed
    (``start``, ``extra``) in one read with them. A row looked up before the load may already
    belong to another instance of the node (another handle or process replaced it meanwhile).

    ``pending``: the tensors are still being read in the background, layer by layer
    (:mod:`.layer_read`; only loads asked for with ``layered=True`` return such chunks): layer
    ``i`` may be read only after ``pending.wait(i)``, anything else only after :meth:`ready`.
    """

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    origin: str = field(default="", compare=False)
    pending: LayerGate | None = field(default=None, compare=False)
    row: NodeInfo | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "values", tuple(self.values))
        if not self.keys or len(self.keys) != len(self.values):
            raise ValueError(
                f"ChunkKV needs the same non-zero number of key and value layers, "
                f"got {len(self.keys)} and {len(self.values)}"
            )
        lengths = set()
        for kind, tensors in (("keys", self.keys), ("values", self.values)):
            for layer, t in enumerate(tensors):
                if not isinstance(t, torch.Tensor) or t.dim() != 3:
                    shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                    raise ValueError(
                        f"ChunkKV {kind}[{layer}] must be a 3-D tensor "
                        f"[kv_heads, n_tokens, head_dim], got {shape}"
                    )
                lengths.add(t.shape[1])
        if len(lengths) != 1:
            raise ValueError(f"ChunkKV layers disagree on n_tokens: {sorted(lengths)}")

    @property
    def n_tokens(self) -> int:
        return int(self.keys[0].shape[1])

    @cached_property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def ready(self) -> ChunkKV:
        """This chunk once every layer is read and checked (at once unless ``pending``).

        :raises ~percache_plugin.kv.layer_read.CorruptLayerError: a layer failed its check."""
        if self.pending is not None:
            self.pending.wait_all()
        return self

    def to(self, dtype: torch.dtype) -> ChunkKV:
        """Same chunk cast to ``dtype`` (tensors already in ``dtype`` are not copied)."""
        self.ready()
        return ChunkKV(
            tuple(t.to(dtype) for t in self.keys), tuple(t.to(dtype) for t in self.values)
        )


@dataclass(frozen=True)
class NodeInfo:
    """A node's metadata. ``nbytes`` is its file size (tensor bytes for in-memory stores)."""

    key: str
    parent: str | None
    n_tokens: int
    start: int
    nbytes: int
    hits: int
    token_hash: str
    created: float
    last_access: float
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class StoreStats:
    """Counters of one fingerprint; persisted with the store (``write_errors`` excepted)."""

    entries: int
    bytes: int
    hits: int
    misses: int
    corrupt: int
    evictions: int
    bytes_loaded: int
    bytes_written: int
    write_errors: int = 0  # this handle's failed writes (not persisted: the disk may be full)


def node_info(row: tuple) -> NodeInfo:
    key, parent, n_tokens, start, nbytes, hits, token_hash, created, last_access, extra = row
    try:
        extra_map = json.loads(extra)
    except (TypeError, ValueError):
        extra_map = {}
    return NodeInfo(key, parent, n_tokens, start, nbytes, hits, token_hash, created,
                    last_access, extra_map if isinstance(extra_map, dict) else {})


def check_node(key: str, kv: ChunkKV, parent: str | None, start: int,
               token_ids: Sequence[int], extra: Mapping[str, str] | None) -> tuple[str, str]:
    """Validate a node about to be stored; return its token-id hash and extra as JSON."""
    validate_key(key)
    if parent is not None and validate_key(parent, "parent") == key:
        raise ValueError(f"node {key!r} cannot be its own parent")
    if not isinstance(kv, ChunkKV):
        raise ValueError(f"kv must be a ChunkKV, got {type(kv).__name__}")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise ValueError(f"start must be a non-negative int, got {start!r}")
    token_hash = hash_token_ids(token_ids)
    n_ids = len(token_ids)
    if n_ids != kv.n_tokens or n_ids == 0:
        raise ValueError(f"node {key!r}: {n_ids} token ids for {kv.n_tokens} K/V positions "
                         "(must be equal and non-zero)")
    return token_hash, json.dumps(_check_extra(extra), sort_keys=True)


def plain(t: torch.Tensor, own: bool) -> torch.Tensor:
    """A contiguous CPU tensor; with ``own``, never sharing memory with ``t``."""
    t = t.detach()
    out = t.to("cpu").contiguous()
    return out.clone() if own and out.data_ptr() == t.data_ptr() else out


def check_limit(limit: int | None) -> int | None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"byte_limit must be a non-negative int or None, got {limit!r}")
    return limit


def _check_extra(extra: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(extra or {})
    for k, v in out.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"extra must map str to str, got {k!r}: {v!r}")
    return out
