"""The server's optional dependencies, with the command that installs them when missing."""

from __future__ import annotations

import importlib

__all__ = ["INSTALL", "require"]

INSTALL = "pip install 'percache-plugin[server]'"


def require(*modules: str) -> None:
    """Import ``modules`` (default: the ASGI stack) or raise naming the install command.

    :raises ModuleNotFoundError: one is missing; the message says ``pip install ...``."""
    for name in modules or ("fastapi", "uvicorn"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                f"percache serve needs {name!r}, which is not installed: {INSTALL}") from exc
