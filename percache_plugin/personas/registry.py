"""``pc.personas``: named system prompts, each optionally with a peft LoRA adapter.

A persona's definition (name, system prompt, adapter directory) is kept in the store's SQLite,
so a later handle on the same store knows it (its adapter is loaded on first use). Adding a
persona with an adapter loads the adapter into the model at once (errors show there), leaving
the model's active adapters as they were: a persona's adapter is applied only for the turns
that ask for the persona.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ..sqlite_tx import Schema, connect, transaction
from .adapters import AdapterSwitch, check_adapter_dir

__all__ = ["Persona", "Personas", "SCHEMA", "UnknownPersona", "adapter_name"]

SCHEMA = Schema("personas", 1, """
CREATE TABLE IF NOT EXISTS personas (
    name TEXT PRIMARY KEY, system_prompt TEXT NOT NULL, adapter TEXT);
""")

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class UnknownPersona(KeyError):
    """No persona of that name; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Persona:
    """A persona: a system prompt and, optionally, a peft LoRA adapter directory."""

    name: str
    system_prompt: str
    adapter: Path | None = None


def adapter_name(persona: Persona) -> str | None:
    """The name the persona's adapter is loaded under in the model (None: no adapter): the
    persona's name and a digest of the directory and its files' sizes and times, so a persona
    defined again with another adapter, or whose adapter was saved again, loads it anew
    instead of running under the weights loaded first."""
    if persona.adapter is None:
        return None
    h = hashlib.blake2b(str(persona.adapter).encode(), digest_size=6)
    with contextlib.suppress(OSError):  # a missing directory fails where it is loaded
        for f in sorted(persona.adapter.iterdir()):
            if f.is_file():
                st = f.stat()
                h.update(f"\0{f.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return f"persona-{persona.name}-{h.hexdigest()}"


class Personas:
    """The personas of one handle (see :meth:`add`).

    :param model_guard: held while an adapter is loaded into the model (the engine's foreground
        lock, so no request or background decode runs meanwhile)."""

    def __init__(self, switch: AdapterSwitch, db_path: Path | None,
                 model_guard: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext) -> None:
        self.switch = switch
        self._guard = model_guard
        self.db = connect(db_path, SCHEMA)
        self._lock = threading.Lock()
        self.removed: list[Callable[[Persona], object]] = []  # called with a removed persona

    def close(self) -> None:
        self.db.close()

    def add(self, name: str, system_prompt: str, adapter: str | Path | None = None) -> Persona:
        """Define persona ``name``: ``chat(..., persona=name)`` then runs with ``system_prompt``
        as the session's system prompt and with ``adapter`` (a peft LoRA directory, as written
        by ``save_pretrained``; None: the base model, every adapter off). Adding the same
        definition again returns it.

        :raises ValueError: a bad name or empty prompt, a name taken by another definition.
        :raises AdapterError: ``adapter`` is not a peft adapter directory or cannot be loaded."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"persona name must be 1-64 letters, digits, '_' or '-', got {name!r}")
        if not isinstance(system_prompt, str) or not system_prompt.strip():
            raise ValueError(f"persona {name!r} needs a non-empty system_prompt, got {system_prompt!r}")
        persona = Persona(name, system_prompt, None if adapter is None else check_adapter_dir(adapter))
        with self._guard(), self._lock:  # the engine's lock first, as in a chat turn
            known = self._row(name)
            if known is not None and known != persona:
                raise ValueError(f"persona {name!r} already exists with another definition; remove() it first")
            if persona.adapter is not None:
                self.switch.load(str(adapter_name(persona)), persona.adapter)
            if known is None:
                with transaction(self.db):
                    self.db.execute("INSERT INTO personas VALUES (?, ?, ?)",
                                    (name, system_prompt, None if persona.adapter is None else str(persona.adapter)))
        return persona

    def _row(self, name: str) -> Persona | None:
        row = self.db.execute("SELECT name, system_prompt, adapter FROM personas WHERE name = ?",
                              (name,)).fetchone()
        return None if row is None else Persona(row[0], row[1], None if row[2] is None else Path(row[2]))

    def get(self, name: str) -> Persona:
        """The persona ``name``.

        :raises UnknownPersona: none of that name."""
        with self._lock:
            persona = self._row(name) if isinstance(name, str) else None
        if persona is None:
            known = ", ".join(p.name for p in self.list()) or "none"
            raise UnknownPersona(f"no persona {name!r} (known: {known}); add it with pc.personas.add()")
        return persona

    def list(self) -> list[Persona]:
        """Every persona, by name."""
        with self._lock:
            rows = self.db.execute("SELECT name FROM personas ORDER BY name").fetchall()
        return [p for (n,) in rows if (p := self._row(n)) is not None]

    def remove(self, name: str) -> None:
        """Forget the persona ``name``: its row, then the ``removed`` listeners are called with
        it (the handle's: its head snapshots under every fingerprint, and a checkpoint of the
        database, so no old WAL frame keeps its prompt). Its adapter leaves the model (a
        persona added again under the name loads its own); the sessions that ran under it keep
        its prompt as their system prompt.

        :raises UnknownPersona: none of that name."""
        persona = self.get(name)
        with self._guard(), self._lock:  # the engine's lock first, as in a chat turn
            with transaction(self.db):
                self.db.execute("DELETE FROM personas WHERE name = ?", (name,))
            loaded = adapter_name(persona)
            if loaded is not None:  # a persona added again under this name loads its own adapter
                self.switch.unload(loaded)
        for listener in self.removed:
            listener(persona)

    def ensure_loaded(self, persona: Persona) -> str | None:
        """Load the persona's adapter into the model if it is not (a persona defined by an
        earlier handle); the adapter's name in the model."""
        name = adapter_name(persona)
        if name is not None and persona.adapter is not None and name not in self.switch.loaded():
            self.switch.load(name, check_adapter_dir(persona.adapter))
        return name
