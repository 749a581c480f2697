"""Linear layers over weights packed once for oneDNN, for the forwards of drafted decoding.

On the CPU, torch computes a float32 linear layer with MKL: a matrix-vector product for one input
row, ``sgemm`` for more, which measured 1.4-3x one row's time for 2-9 rows (as if it packed the
weight matrix at every call; a weight packed once removes the difference). The forward that
verifies a draft then costs 1.5-2x a one-token forward where the weights' memory traffic should make it cost about the same (SmolLM2-135M
on one thread, docs/BENCHMARKS.md, "What a verify forward costs": 2 rows cost 1.6x one row for
the 1536x576 projections and 2.0x for the 49152x576 lm_head). oneDNN over a weight reordered once
into its blocked layout costs about one row's time for 1-9 rows.

:class:`PackedLinears` holds such copies of a model's float32 CPU ``nn.Linear`` weights (the
model's parameters are not touched: its fingerprint and every other path see the same tensors)
and, as a context manager, routes ``torch.nn.functional.linear`` calls on those weights to
``torch.ops.mkldnn._linear_pointwise`` through a :class:`~torch.overrides.TorchFunctionMode`
(torch's own interception seam; nothing of the model's code is replaced, and the mode is
thread-local, entered only around the forwards that verify drafts). The results differ
from MKL's by float rounding only (another summation order, as between MKL's one-row and
several-row kernels); a weight changed in place since it was packed is computed with the
model's own kernel (:attr:`PackedLinears.stale_calls`). The copies cost the memory of the
linear weights once more (SmolLM2-135M: 538 MB in float32, made in 0.45 s on a quiet core,
1.5-2.3 s on a loaded one); :class:`PackOnDemand` makes them at the first forward that verifies
draft tokens after an answer's first token, so the packing never delays a first token.
``Config.draft_packed_linears`` switches them off.

Two more measured choices of kernel ride on the same mode (docs/BENCHMARKS.md, "Verify forwards
nearer one-token cost"). oneDNN computes 2 or 3 rows slower than 4 (a forward verifying one draft
token cost 1.3-1.4 one-token forwards, three 1.1-1.2): such inputs are padded with zero rows to
:data:`MIN_ROWS` and the padding dropped from the result (the rows computed are the same values,
bit for bit, on the machine measured; :attr:`PackedLinears.padded_calls`). And the grouped-query
attention of the verify forward attends each key/value head's query heads as one block of rows
(:mod:`.folded`; :attr:`PackedLinears.folded_calls`), where :attr:`PackedLinears.fold_attention`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .folded import fold_applies, folded_sdpa

__all__ = ["MIN_ROWS", "PackOnDemand", "PackedLinears", "packing_problem"]

_LINEAR: tuple[Callable[..., Any], ...] = (torch.nn.functional.linear, torch._C._nn.linear)
_SDPA: Callable[..., Any] = torch.nn.functional.scaled_dot_product_attention
# Fewer input rows than this (but more than one) are padded with zero rows to this many.
MIN_ROWS = 4


def packing_problem(model: torch.nn.Module) -> str:
    """Why :meth:`PackedLinears.of` would pack nothing for ``model`` ("" when it packs)."""
    if not torch.backends.mkldnn.is_available():
        return "torch was built without oneDNN (mkldnn)"
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight")):
        return "this torch has no oneDNN linear ops (mkldnn._linear_pointwise, _reorder_linear_weight)"
    if not any(_packable(m) for m in model.modules()):
        return "no float32 nn.Linear weights on the CPU"
    return ""


def _packable(module: torch.nn.Module) -> bool:
    w = getattr(module, "weight", None)
    return (isinstance(module, torch.nn.Linear) and isinstance(w, torch.Tensor) and w.dim() == 2
            and w.dtype == torch.float32 and w.device.type == "cpu")


def _version_of(w: torch.Tensor) -> int:
    """The in-place version counter of ``w`` (-1 for an inference tensor, which has none)."""
    try:
        return int(w._version)
    except RuntimeError:
        return -1


@dataclass
class _Packed:
    weight: weakref.ref[torch.Tensor]
    version: int
    data_ptr: int
    packed: torch.Tensor


class _Route(TorchFunctionMode):
    def __init__(self, owner: PackedLinears) -> None:
        super().__init__()
        self.owner = owner
        self.calls = 0  # linear calls computed over packed weights while this mode was entered
        self.folds = 0  # attention calls computed with folded query groups (decode/folded.py)

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _LINEAR:
            out = self.owner.linear(*args, **kwargs)
            if out is not None:
                self.calls += 1
                return out
        elif func is _SDPA and self.owner.fold_attention and fold_applies(args, kwargs):
            self.folds += 1
            self.owner.folded_calls += 1
            query, key, value = args
            return folded_sdpa(query, key, value, kwargs["attn_mask"], kwargs.get("scale"))
        return func(*args, **kwargs)


class PackedLinears:
    """oneDNN-packed copies of ``model``'s float32 CPU linear weights; ``with packed.active():``
    computes the linear layers on those weights with them (see the module docstring).

    :ivar calls: linear calls computed over a packed weight.
    :ivar stale_calls: calls on a packed weight that changed since it was packed (computed
        with the model's own kernel instead).
    :ivar min_rows: fewer input rows than this (but more than one) are computed padded with
        zero rows to this many (:data:`MIN_ROWS`; 1: never).
    :ivar padded_calls: calls so computed.
    :ivar fold_attention: whether :meth:`active` also computes grouped-query attention with
        folded query groups (:mod:`.folded`).
    :ivar folded_calls: attention calls so computed.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        problem = packing_problem(model)
        if problem:
            raise ValueError(f"cannot pack {type(model).__name__}'s linear weights: {problem}")
        self._table: dict[int, _Packed] = {}
        with torch.no_grad():
            for module in model.modules():
                w = getattr(module, "weight", None)
                if isinstance(w, torch.Tensor) and _packable(module) and id(w) not in self._table:
                    packed = torch.ops.mkldnn._reorder_linear_weight(w.detach())
                    self._table[id(w)] = _Packed(weakref.ref(w), _version_of(w), w.data_ptr(), packed)
        self.calls = 0
        self.stale_calls = 0
        self.min_rows = MIN_ROWS
        self.padded_calls = 0
        self.fold_attention = True
        self.folded_calls = 0

    @classmethod
    def of(cls, model: torch.nn.Module) -> PackedLinears | None:
        """Packed weights for ``model``, or None where nothing can be packed (:func:`packing_problem`)."""
        return None if packing_problem(model) else cls(model)

    @property
    def weights(self) -> int:
        """How many weight matrices are packed."""
        return len(self._table)

    @property
    def nbytes(self) -> int:
        """Memory the packed copies take (their elements; oneDNN's opaque tensors show no storage)."""
        return sum(p.packed.numel() * p.packed.element_size() for p in self._table.values())

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor | None:
        """``F.linear(x, weight, bias)`` over the packed copy of ``weight``; None where ``weight``
        is not packed (or changed since) or ``x`` is not a float32 CPU tensor."""
        entry = self._table.get(id(weight))
        if entry is None or entry.weight() is not weight:
            return None
        if not (isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.device.type == "cpu"
                and x.dim() >= 2 and x.shape[-1] == weight.shape[1]):
            return None
        if _version_of(weight) != entry.version or weight.data_ptr() != entry.data_ptr:
            self.stale_calls += 1
            return None
        self.calls += 1
        rows = x.numel() // x.shape[-1]
        if not 1 < rows < self.min_rows:
            return torch.ops.mkldnn._linear_pointwise(x, entry.packed, bias, "none", [], "")
        self.padded_calls += 1
        padded = torch.cat([x.reshape(rows, x.shape[-1]), x.new_zeros(self.min_rows - rows, x.shape[-1])])
        out = torch.ops.mkldnn._linear_pointwise(padded, entry.packed, bias, "none", [], "")
        return out[:rows].reshape(*x.shape[:-1], out.shape[-1])

    def active(self) -> _Route:
        """A context manager (a ``TorchFunctionMode``) routing the linear calls on packed weights
        to the packed copies in this thread while it is entered; its ``calls`` counts them (a
        new one per use: threads do not share it)."""
        return _Route(self)


class PackOnDemand:
    """The :class:`PackedLinears` of ``model``, made at the first :meth:`get`.

    The engine hands one to every drafted decoding of a handle; the decoding loop asks for the
    copies only in a forward that verifies draft tokens after the answer's first token, so
    the packing (~0.45 s on SmolLM2) lands inside a decoding it then speeds up, never before a
    time to first token (a one-token request never packs).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self._model = model
        self.packed: PackedLinears | None = None

    def where(self, on: bool) -> PackOnDemand | None:
        """Itself where packing is ``on`` and the model can be packed; else None (and when
        switched off, the copies are freed)."""
        if not on:
            self.packed = None
        return self if on and not packing_problem(self._model) else None

    def get(self) -> PackedLinears:
        """The packed copies, made now if they are not yet."""
        if self.packed is None:
            self.packed = PackedLinears(self._model)
        return self.packed
