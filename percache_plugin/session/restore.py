"""Reading a stored session into memory, and bringing a handle's copy up to the stored state."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..decode import dtype_device
from .evict import compact, masked_keep
from .persist import SessionStore
from .state import Session

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["read_session", "adopt"]


def read_session(engine: Engine, store: SessionStore, name: str) -> Session | None:
    """Session ``name`` as ``store`` holds it, ready for its next turn (None: not stored)."""
    dtype, device = dtype_device(engine.model)
    loaded = store.load(name, dtype, device)
    if loaded is None:
        return None
    session, source = loaded
    session.restored, session.fingerprint = source, store.fingerprint
    if source == "ids":  # the store said why (a warning only when a snapshot was lost)
        compact(session)  # without the slots, masked turns would be attended again
    if any(t.masked for t in session.turns) and source == "snapshot":
        session.keep = masked_keep(session)
    engine.hooks.session_loaded(engine.ctx, session, source)
    return session


def adopt(session: Session, fresh: Session, version: int) -> None:
    """Make ``session`` (whose lock the caller holds) the state ``fresh`` at ``version``."""
    for f in dataclasses.fields(Session):
        if f.name != "lock":
            setattr(session, f.name, getattr(fresh, f.name))
    session.version = version
