"""Cache writes never fail a request: the answer matters more than remembering it."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stats import GenerationStats, StatsTotals

__all__ = ["WRITE_FAILURES", "best_effort", "retry_delay"]

log = logging.getLogger("percache")

WRITE_FAILURES = (OSError, sqlite3.Error)
"""What a failed cache write raises: a full disk, a read-only or locked database, a path taken."""


@contextmanager
def best_effort(what: str, totals: StatsTotals,
                stats: GenerationStats | None = None) -> Iterator[None]:
    """Run a cache write; on a write failure log a warning naming ``what``, count it in
    ``stats.store_errors`` (if given) and the handle's ``totals``, and go on."""
    try:
        yield
    except WRITE_FAILURES as exc:
        log.warning("percache: %s failed (%s: %s); the answer is returned without it",
                    what, type(exc).__name__, exc)
        totals.store_errors += 1
        if stats is not None:
            stats.store_errors += 1


def retry_delay(failures: int, first_s: float = 1.0, most_s: float = 300.0) -> float:
    """The wait before trying again work that failed ``failures`` times in a row: ``first_s``,
    doubling per failure, at most ``most_s`` (a failure that persists neither spins nor gives up)."""
    return min(first_s * 2 ** (failures - 1), most_s)
