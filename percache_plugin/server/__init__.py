"""``percache serve``: an OpenAI-compatible local server over a percache handle.

Optional: ``pip install 'percache-plugin[server]'`` (Starlette and uvicorn). Nothing here
imports them until :func:`build_app` or :func:`serve` is called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_app", "serve", "ServerSettings"]


def __getattr__(name: str) -> Any:
    if name == "build_app":
        from .app import build_app

        return build_app
    if name == "serve":
        from .serve import serve

        return serve
    if name == "ServerSettings":
        from .state import ServerSettings

        return ServerSettings
    raise AttributeError(name)
