"""Pure data types shared by every layer (no model, no storage, no hooks)."""

from .capabilities import Capabilities
from .query import Query

__all__ = ["Capabilities", "Query"]
