"""What ``pc.sessions`` tells about its sessions: :class:`SessionInfo` (``list()``) and
:class:`UnknownSession`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .listing import StoredSession
from .state import Session, cache_bytes, cache_tokens

__all__ = ["SessionInfo", "UnknownSession", "session_infos"]


class UnknownSession(KeyError):
    """No session of that name; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class SessionInfo:
    """A session at a glance (``pc.sessions.list()``)."""

    name: str
    turns: int  # turns still in context
    evicted_turns: int
    tokens: int  # conversation tokens in context
    kv_tokens: int  # cache positions
    kv_bytes: int
    system: str | None
    fingerprint: str = ""  # saved under other weights only (a LoRA persona's; chat(persona=) resumes it)
    unreadable_turns: tuple[int, ...] = ()  # turns whose saved rows were corrupt when read (dropped or repaired)


def session_infos(sessions: Iterable[Session], elsewhere: Iterable[StoredSession]) -> list[SessionInfo]:
    """The sessions of the weights in use, then those saved only under other weights (with
    ``fingerprint`` set) whose names are not among them; by name."""
    infos = [SessionInfo(s.name, len(s.turns), s.evicted_turns, s.n_tokens,
                         cache_tokens(s.cache), cache_bytes(s.cache), s.system,
                         unreadable_turns=tuple(s.unreadable_turns)) for s in sessions]
    known = {i.name for i in infos}
    infos += [SessionInfo(e.name, e.turns, e.evicted_turns, e.tokens, e.kv_tokens, e.kv_bytes,
                          e.system, e.fingerprint) for e in elsewhere if e.name not in known]
    return sorted(infos, key=lambda i: i.name)
