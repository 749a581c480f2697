"""Orders of benchmark arms in which every arm follows every other arm equally often.

An arm's timing depends on what ran just before it in the same process (the memory the
allocator hands back, page faults on fresh pages, what is in the CPU caches), so a fixed order
favours some arms. A balanced Latin square (Williams design) fixes that: over its rows every
arm runs at every position equally often and directly after every other arm exactly once
(``n`` rows for an even number of arms, ``2 n`` for an odd one). :func:`arm_orders` cycles its
rows over the repeats, and :func:`predecessors` names, per timed run, the arm that ran just
before it, so that a report can give the figures per order too.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["balanced_orders", "arm_orders", "predecessors", "balanced_repeats"]


def balanced_orders(arms: Sequence[str]) -> list[list[str]]:
    """The rows of a Williams design over ``arms``: within the rows, every ordered pair of
    different arms ``(a, b)`` occurs as neighbours ``a`` then ``b`` exactly once (even count)
    or twice (odd count, where the mirrored rows are added). Raises ValueError for no arms or
    repeated names."""
    n = len(arms)
    if n == 0 or len(set(arms)) != n:
        raise ValueError(f"arm names must be distinct and at least one: {list(arms)}")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[arms[(i + r) % n] for i in first] for r in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


def balanced_repeats(n_arms: int) -> int:
    """How many repeats make one full round of :func:`balanced_orders` (a multiple balances)."""
    return n_arms if n_arms % 2 == 0 else 2 * n_arms


def arm_orders(arms: Sequence[str], repeats: int) -> list[list[str]]:
    """One order of ``arms`` per repeat, cycling the rows of :func:`balanced_orders`; balanced
    exactly when ``repeats`` is a multiple of :func:`balanced_repeats`."""
    if repeats < 0:
        raise ValueError(f"repeats must be >= 0, got {repeats}")
    rows = balanced_orders(arms)
    return [list(rows[r % len(rows)]) for r in range(repeats)]


def predecessors(orders: Sequence[Sequence[str]], start: str = "start") -> list[dict[str, str]]:
    """Per repeat, each arm's predecessor: the arm run just before it, across repeats too (the
    previous repeat's last arm), ``start`` for the very first."""
    out: list[dict[str, str]] = []
    prev = start
    for order in orders:
        row: dict[str, str] = {}
        for arm in order:
            row[arm] = prev
            prev = arm
        out.append(row)
    return out
