"""The debug log (``Config(debug_log=True)``): the ``percache`` logger, visible without any
``logging`` set-up by the application."""

from __future__ import annotations

import logging
import sys

__all__ = ["LOGGER_NAME", "ensure_handler"]

LOGGER_NAME = "percache"
_HANDLER_NAME = "percache-debug-log"


def ensure_handler(logger: logging.Logger | None = None) -> logging.Handler | None:
    """Give the ``percache`` logger a stderr handler at INFO when nothing would show its lines
    (no handler of its own, and the root logger has none either); returns the handler added.
    An application that configures logging itself keeps full control."""
    logger = logger or logging.getLogger(LOGGER_NAME)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    if any(h.get_name() == _HANDLER_NAME for h in logger.handlers):
        return None
    if logger.handlers or logging.getLogger().handlers:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    return handler
