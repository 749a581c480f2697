"""The personal assistant: ask(), documents, idle-time work and its worker thread."""

from .ask import Answer
from .assistant import Assistant

__all__ = ["Answer", "Assistant"]
