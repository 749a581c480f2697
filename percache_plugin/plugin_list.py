"""``percache plugins``: what is loaded, and which hooks each plugin implements."""

from __future__ import annotations

import argparse
import os

from .hooks.manager import AUTOLOAD_ENV, make_plugin_manager

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options


def run(args: argparse.Namespace) -> int:
    pm = make_plugin_manager()
    autoload = os.environ.get(AUTOLOAD_ENV, "") in ("", "0")
    print(f"entry-point autoload: {'on' if autoload else f'off ({AUTOLOAD_ENV} is set)'}")
    for name, plugin in pm.list_name_plugin():
        hooks = sorted(h.name for h in (pm.get_hookcallers(plugin) or []))
        print(f"{name}\n    hooks: {', '.join(hooks)}")
    return 0
