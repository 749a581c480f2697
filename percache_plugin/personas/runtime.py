"""Persona turns for :class:`~percache_plugin.session.sessions.Sessions`: the adapter applied
around the turn, the session's head set to the persona's and served from its snapshot."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..decode import dtype_device
from ..session.layout import ChatLayout
from ..session.reply import ChatStats
from ..session.state import Session
from .adapters import AdapterSwitch
from .head import enter_head, snapshot_head
from .heads import HeadSnapshots, head_key
from .registry import Persona, Personas

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["PersonaRuntime"]

log = logging.getLogger("percache")


class PersonaRuntime:
    """The personas of one handle and what a persona turn does around the chat turn.

    :param db_path: the store's session database (None: personas and head snapshots in memory).
    """

    def __init__(self, engine: Engine, layout: ChatLayout, root: Path | None, db_path: Path | None) -> None:
        self.engine = engine
        self.layout = layout
        self.switch = AdapterSwitch(engine.model)
        self.personas = Personas(self.switch, db_path,
                                 lambda: engine.preemption.foreground(engine.lock))
        self.heads = HeadSnapshots(root, db_path)
        self.personas.removed.append(self.drop_heads)

    def drop_heads(self, persona: Persona) -> int:
        """Delete a removed persona's head snapshots under every fingerprint: its head's ids as
        laid out with and without the chat template (a snapshot written before
        ``configure(chat_template=...)``), unless a remaining persona has the same head."""
        layouts = [self.layout]
        with contextlib.suppress(ValueError):  # no template to render with (LayoutError too)
            layouts.append(ChatLayout(self.layout.tokenizer, not self.layout.use_template))
        keys = {head_key(lay.head(persona.system_prompt)[0]) for lay in layouts}
        kept = {head_key(lay.head(p.system_prompt)[0]) for p in self.personas.list() for lay in layouts}
        return self.heads.drop(keys - kept)

    def close(self) -> None:
        self.personas.close()
        self.heads.close()

    @contextlib.contextmanager
    def applied(self, name: str | None) -> Iterator[Persona | None]:
        """Run the block under persona ``name``'s adapter (None: no persona, the model as it
        is); the model's adapter state is restored afterwards, and the engine keyed by the
        weights in use again (else the store of the adapter's weights stayed the handle's:
        the sessions saved under the weights in use were not found until the next request).

        :raises UnknownPersona: no persona ``name``."""
        if name is None:
            yield None
            return
        persona = self.personas.get(name)
        adapter = self.personas.ensure_loaded(persona)
        try:
            with self.switch.applied(adapter):
                yield persona
        finally:
            self.engine.follow_model()

    def enter(self, session: Session, persona: Persona | None, stats: ChatStats) -> bool:
        """Give the session the persona's head, from its snapshot when the cache is empty;
        whether the head must be snapshotted after the turn (call after the fingerprint was
        followed: the snapshot is looked up under the weights now in use)."""
        if persona is None:
            return False
        dtype, device = dtype_device(self.engine.model)
        engine = self.engine
        return enter_head(session, persona, self.layout, self.heads, engine.fingerprint, stats, dtype, device,
                          lambda name, version, read: engine.hooks.load_head(engine.ctx, name, version, read))

    def snapshot(self, session: Session, stats: ChatStats) -> None:
        """Store the head computed in this turn (best effort: a failed write counts in
        ``stats.store_errors``)."""
        try:
            snapshot_head(session, self.heads, self.engine.fingerprint, stats)
        except (OSError, sqlite3.Error) as exc:
            stats.store_errors += 1
            log.warning("percache: could not store the head of persona %r: %s", stats.persona, exc)
