"""RoPE phase shift: move stored post-RoPE keys to other positions without recomputing them.

A key at position ``p`` is stored as ``s * R(p) k`` (``R`` the RoPE rotation, ``s`` the rotary
module's ``attention_scaling``, which yarn/longrope fold into cos/sin). Rotations compose, so
``R(d) (s * R(p) k) = s * R(p + d) k``: the shift is a pure rotation by ``d`` whose cos/sin must
not carry ``s`` again. Frequencies come from a snapshot of each rotary module's ``inv_freq``
taken in :meth:`RopeShifter.from_model`; a rotary module is never called (a dynamic one resets
its ``inv_freq`` when called with small positions).

The shift is exact (up to float rounding) for RoPE types whose frequencies do not depend on the
sequence length; :data:`ROPE_TYPES` says which those are.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch
from torch import nn

from .profile import (
    NO_ROPE,
    SHARED_ROPE,
    ModelProfile,
    RopeSlot,
    Rotate,
    resolve_profile,
    rotary_modules,
    text_config,
)

__all__ = ["ROPE_TYPES", "NotShiftable", "RopeShifter", "shift_support"]

ROPE_TYPES: Mapping[str, str | None] = MappingProxyType(
    {
        "default": None,
        "linear": None,
        "llama3": None,
        "yarn": None,
        "dynamic": "dynamic NTK recomputes inv_freq from the sequence length, so a key's phase depends "
        "on the length of the prompt it was computed in; recompute instead",
        "longrope": "longrope switches between short and long frequency factors by sequence length; "
        "recompute instead",
        "proportional": "proportional RoPE has not been verified for shifting",
    }
)
"""``rope_type`` -> ``None`` if shifting is exact, else the reason it is not."""


class NotShiftable(Exception):
    """Stored keys of this model cannot be moved to other positions; :attr:`reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, eq=False)
class RopeShifter:
    """Rotates stored post-RoPE keys of one model by a position delta.

    Build it with :meth:`from_model`. Fields are a frozen snapshot; ``inv_freq`` maps each RoPE
    parameter set named in ``layer_rope`` to its fp32 CPU frequencies (``rotary_dims // 2``);
    ``rope_slot`` names the cache slot the rotated dims are in (:meth:`shift_kv` picks it).
    """

    model_type: str
    rotary_dims: int
    rotate: Rotate
    layer_rope: tuple[str, ...]
    inv_freq: Mapping[str, torch.Tensor]
    attention_scaling: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    rope_slot: RopeSlot = "keys"

    def __post_init__(self) -> None:
        half = self.rotary_dims // 2
        for key, freqs in self.inv_freq.items():
            if freqs.shape != (half,):
                raise ValueError(
                    f"{self.model_type}: rotary_dims={self.rotary_dims} needs {half} frequencies, "
                    f"RoPE set {key!r} has shape {tuple(freqs.shape)}"
                )
        missing = {k for k in self.layer_rope if k != NO_ROPE} - set(self.inv_freq)
        if missing:
            raise ValueError(
                f"{self.model_type}: layer_rope names RoPE sets without frequencies: {sorted(missing)}"
            )

    @classmethod
    def from_model(cls, model: nn.Module, profile: ModelProfile | None = None, *,
                   table: Mapping[str, ModelProfile] | None = None) -> RopeShifter:
        """Snapshot ``model``'s RoPE frequencies; ``profile`` overrides the entry of ``table``
        (default: the built-in table).

        :raises NotShiftable: the model has learned or no positions, a RoPE type whose phase
            depends on sequence length (dynamic NTK, longrope) or an unknown one, no rotary
            module with ``inv_freq``, a profile that disagrees with the rotary module, or an
            unknown family whose positions cannot be told (pass a profile).
        :raises TypeError: ``model`` is not a transformers model with a config.
        """
        try:
            profile = resolve_profile(model, profile, table)
        except ValueError as exc:  # unknown family, or one a ModelProfile cannot describe
            raise NotShiftable(str(exc)) from exc
        name = profile.model_type
        if profile.positions != "rope":
            raise NotShiftable(
                f"{name}: positions are {profile.positions!r}, not RoPE ({profile.notes or 'no rotary phase'}); "
                "keys can be reused only at the positions they were computed at"
            )
        config = text_config(model)
        num_layers: int = config.num_hidden_layers
        layer_rope = profile.layer_rope or (SHARED_ROPE,) * num_layers
        if len(layer_rope) != num_layers:
            raise NotShiftable(
                f"{name}: profile.layer_rope has {len(layer_rope)} entries for {num_layers} layers"
            )
        sets = sorted(set(layer_rope) - {NO_ROPE})
        if not sets:
            raise NotShiftable(f"{name}: no layer applies RoPE; describe it with positions='none'")
        inv_freq, scaling = _snapshot(name, model, sets)
        _check_rope_types(name, getattr(config, "rope_parameters", None) or {}, sets)
        rotary_dims = profile.rotary_dims or 2 * next(iter(inv_freq.values())).numel()
        for key, freqs in inv_freq.items():
            if 2 * freqs.numel() != rotary_dims:
                raise NotShiftable(
                    f"{name}: profile says {rotary_dims} rotary dims but the rotary module has "
                    f"{freqs.numel()} frequencies ({2 * freqs.numel()} dims) for RoPE set {key!r}"
                )
        return cls(
            name,
            rotary_dims,
            profile.rotate,
            tuple(layer_rope),
            MappingProxyType(inv_freq),
            MappingProxyType(scaling),
            profile.rope_slot,
        )

    def shift(self, key: torch.Tensor, layer_idx: int, delta: int | torch.Tensor) -> torch.Tensor:
        """Return ``key`` (post-RoPE) rotated by ``+delta`` positions, same shape and dtype.

        :param key: ``[kv_heads, T, head_dim]`` or ``[batch, kv_heads, T, head_dim]``, any float dtype.
        :param layer_idx: the decoder layer the keys belong to (selects the RoPE set).
        :param delta: positions to add: an int (may be negative) or an integer tensor, 0-d or
            1-D of length ``T`` (per-token deltas).
        """
        if key.dim() not in (3, 4) or not key.is_floating_point():
            raise ValueError(
                f"key must be a float tensor [kv_heads, T, head_dim] or [batch, kv_heads, T, head_dim], "
                f"got {key.dtype} of shape {tuple(key.shape)}"
            )
        if not 0 <= layer_idx < len(self.layer_rope):
            raise IndexError(
                f"layer_idx {layer_idx} out of range for {len(self.layer_rope)} layers"
            )
        if key.shape[-1] < self.rotary_dims:
            raise ValueError(
                f"key head_dim {key.shape[-1]} is smaller than rotary_dims {self.rotary_dims}"
            )
        deltas = _deltas(delta, key.shape[-2])
        rope_set = self.layer_rope[layer_idx]
        if rope_set == NO_ROPE:
            return key.clone()
        # Angles in float64 (|delta * inv_freq| reaches 1e4+ rad), cos/sin and products in fp32.
        angles = deltas[:, None] * self.inv_freq[rope_set].to(torch.float64)[None, :]
        cos = angles.cos().to(device=key.device, dtype=torch.float32)
        sin = angles.sin().to(device=key.device, dtype=torch.float32)
        rot = key[..., : self.rotary_dims].float()
        if self.rotate == "half":
            x1, x2 = rot.chunk(2, dim=-1)
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        return torch.cat((out.to(key.dtype), key[..., self.rotary_dims :]), dim=-1)

    def shift_kv(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int,
                 delta: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(keys, values)`` of one cache layer with the slot holding the rotated dims
        (``rope_slot``) moved by ``delta`` in fp32 (:meth:`shift`); the other is returned as given."""
        if self.rope_slot == "values":
            return keys, self.shift(values.float(), layer_idx, delta)
        return self.shift(keys.float(), layer_idx, delta), values


def shift_support(model: nn.Module, profile: ModelProfile | None = None) -> tuple[bool, str]:
    """``(True, "")`` if :meth:`RopeShifter.from_model` succeeds for ``model``, else ``(False, reason)``."""
    try:
        RopeShifter.from_model(model, profile)
    except NotShiftable as exc:
        return False, exc.reason
    return True, ""


def _check_rope_types(name: str, rope_parameters: Mapping[str, object], sets: list[str]) -> None:
    for rope_set in sets:
        params = rope_parameters if rope_set == SHARED_ROPE else rope_parameters.get(rope_set)
        rope_type = params.get("rope_type") if isinstance(params, Mapping) else None
        if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
            raise NotShiftable(f"{name}: unknown rope_type {rope_type!r} for RoPE set {rope_set!r}")
        reason = ROPE_TYPES[rope_type]
        if reason is not None:
            raise NotShiftable(f"{name}: rope_type {rope_type!r}: {reason}")


def _snapshot(
    name: str, model: nn.Module, sets: list[str]
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """fp32 CPU copies of ``inv_freq`` and ``attention_scaling`` for each RoPE set."""
    modules = rotary_modules(model)
    if not modules:
        raise NotShiftable(f"{name}: no rotary embedding module with an inv_freq buffer")
    inv_freq: dict[str, torch.Tensor] = {}
    scaling: dict[str, float] = {}
    for rope_set in sets:
        prefix = "" if rope_set == SHARED_ROPE else f"{rope_set}_"
        found = []
        for module in modules:
            buffers = dict(module.named_buffers(recurse=False))
            if f"{prefix}inv_freq" in buffers:
                freqs = (
                    buffers[f"{prefix}inv_freq"]
                    .detach()
                    .to(device="cpu", dtype=torch.float32)
                    .clone()
                )
                found.append((freqs, float(getattr(module, f"{prefix}attention_scaling", 1.0))))
        if not found:
            raise NotShiftable(
                f"{name}: no rotary module has '{prefix}inv_freq' for RoPE set {rope_set!r}"
            )
        if any(not torch.equal(f, found[0][0]) or s != found[0][1] for f, s in found[1:]):
            raise NotShiftable(
                f"{name}: {len(found)} rotary modules disagree on '{prefix}inv_freq'"
            )
        inv_freq[rope_set], scaling[rope_set] = found[0]
    return inv_freq, scaling


def _deltas(delta: int | torch.Tensor, length: int) -> torch.Tensor:
    """Per-token deltas as a float64 CPU tensor of shape ``[1]`` or ``[length]``."""
    if isinstance(delta, torch.Tensor):
        if delta.is_floating_point() or delta.is_complex() or delta.dim() > 1:
            raise ValueError(
                f"delta must be an int or an integer tensor of dim <= 1, got {delta.dtype} {tuple(delta.shape)}"
            )
        if delta.dim() == 1 and delta.numel() != length:
            raise ValueError(
                f"per-token delta has length {delta.numel()}, keys have {length} tokens"
            )
        return delta.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
    if isinstance(delta, bool) or not isinstance(delta, numbers.Integral):
        raise ValueError(f"delta must be an int or an integer tensor, got {type(delta).__name__}")
    return torch.tensor([int(delta)], dtype=torch.float64)
