"""Named extension points filled by plugins (``register_*`` hooks, in the style of simonw/llm).

A handle builds one :class:`Registry` per kind at enable time: it calls the kind's
``percache_register_*(register)`` hook, and every plugin (the built-ins first, since they are
registered first) passes what it provides to ``register``. A later registration of a name
replaces an earlier one, so a plugin can override a built-in entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Entries of one kind, by name (a read-only mapping once collected).

    :param kind: what the entries are (for error messages), e.g. ``"recompute strategy"``.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> None:
        """Add ``item`` under ``name`` (replacing an earlier entry of that name)."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"{self.kind} name must be a non-empty str without ':', got {name!r}")
        self._items[name] = item

    def collect(self, hook: Callable[..., object]) -> Registry[T]:
        """Call a ``percache_register_*`` hook with :meth:`register`; returns self."""
        hook(register=self.register)
        return self

    def require(self, name: str) -> T:
        """The entry named ``name``; ``ValueError`` naming the known ones otherwise."""
        try:
            return self._items[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {sorted(self._items)}") from None

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
