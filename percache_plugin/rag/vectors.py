"""Checks of the numbers an index is given: positive sizes, finite non-zero vectors."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

__all__ = ["positive_int", "unit_rows"]


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1 (not a bool), else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def unit_rows(array: object, dim: int, what: str) -> np.ndarray:
    """``array`` as float32 rows of unit L2 norm, shape ``[n, dim]``; ValueError naming ``what``
    for a wrong shape, NaN/inf or an all-zero row (cosine is undefined)."""
    rows = np.array(array, dtype=np.float32, ndmin=2)
    if rows.ndim != 2 or rows.shape[1] != dim:
        raise ValueError(f"{what} must have shape [n, {dim}], got {np.shape(cast(Any, array))}")
    if not np.isfinite(rows).all():
        raise ValueError(f"{what} contain NaN or infinite values")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"{what} contain an all-zero row (cosine is undefined)")
    return rows / norms
