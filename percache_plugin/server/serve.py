"""Running the app under uvicorn: in the foreground (``percache serve``) or in a thread on a
free loopback port (tests, benchmarks)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from .auth import check_bind
from .deps import require
from .state import ServerSettings

__all__ = ["serve", "ServerThread", "free_port"]


def _config(pc: Any, settings: ServerSettings, host: str, port: int, log_level: str) -> Any:
    require("starlette", "uvicorn")
    import uvicorn

    from .app import build_app

    check_bind(host, settings.tokens)
    return uvicorn.Config(build_app(pc, settings), host=host, port=port, log_level=log_level,
                          access_log=log_level == "debug", timeout_graceful_shutdown=5)


def _server(config: Any) -> Any:
    """A uvicorn server that tells the app's runner when shutdown begins (uvicorn tells the app
    only after its requests ended or were cut): queued requests end at once with an error
    naming the shutdown, then ``[DONE]`` when streamed, and the running one is stopped a second
    before the grace period ends, so that it too ends so rather than being cut."""
    import uvicorn

    runner = config.app.state.server.runner

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            runner.shut()
            grace = self.config.timeout_graceful_shutdown
            if grace is not None:
                asyncio.get_running_loop().call_later(max(grace - 1.0, 0.0), runner.stop_running)
            await super().shutdown(sockets)

    return Server(config)


def serve(pc: Any, settings: ServerSettings, host: str = "127.0.0.1", port: int = 8000,
          log_level: str = "info") -> None:
    """Serve ``pc`` until interrupted (SIGINT or SIGTERM: the running request may finish for
    at most 5 s; queued ones end at once with an error naming the shutdown, see
    :func:`_server`). :raises BindError: a non-loopback ``host`` without a token."""
    try:
        _server(_config(pc, settings, host, port, log_level)).run()
    except KeyboardInterrupt:  # Ctrl-C (uvicorn re-raises the signal once it shut down) is how it stops
        pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerThread:
    """A server in a daemon thread: ``with ServerThread(pc, settings) as srv: srv.url``."""

    def __init__(self, pc: Any, settings: ServerSettings | None = None, host: str = "127.0.0.1",
                 port: int | None = None, log_level: str = "warning") -> None:
        self.host, self.port = host, port or free_port(host)
        self.config = _config(pc, settings or ServerSettings(), host, self.port, log_level)
        self.server = _server(self.config)
        self._thread = threading.Thread(target=self.server.run, name="percache-uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def state(self) -> Any:
        """The app's :class:`~percache_plugin.server.state.ServerState`."""
        return self.config.app.state.server

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        end = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > end:
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
