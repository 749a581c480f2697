"""The PerCache handle: an :class:`~percache_plugin.engine.Engine` composed with an
:class:`~percache_plugin.assistant.Assistant`, and :func:`enable`.

- :mod:`.handle`: :class:`PerCache` (requests, settings, life cycle) and :func:`enable`;
- :mod:`.parts`: what a handle is made of (model, store, banks, queue), as read-only views.
"""

from .handle import PerCache, enable

__all__ = ["PerCache", "enable"]
