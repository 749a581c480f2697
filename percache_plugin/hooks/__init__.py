"""Hook specifications and the plugin manager."""

from .manager import DEFAULT_PLUGINS, Hooks, make_plugin_manager
from .specs import HOOK_NAMES, hookimpl, hookspec

__all__ = ["DEFAULT_PLUGINS", "HOOK_NAMES", "Hooks", "hookimpl", "hookspec", "make_plugin_manager"]
