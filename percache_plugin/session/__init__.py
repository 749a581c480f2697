"""Conversations: per-session K/V carried across turns (``pc.chat``, ``pc.sessions``)."""

from .chat import MessageTooLong
from .locks import SessionBusy
from .reply import ChatStats, Reply
from .sessions import DEFAULT_SESSION, SessionInfo, Sessions, UnknownSession

__all__ = ["ChatStats", "DEFAULT_SESSION", "MessageTooLong", "Reply", "SessionBusy", "SessionInfo",
           "Sessions", "UnknownSession"]
