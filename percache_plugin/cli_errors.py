"""How the ``percache`` console script reports bad input: one line with a hint, exit code 2.

Commands raise :class:`UsageError` for what the user can fix; ``main`` also turns the usual
bad-input exceptions (missing files, bad values) into the same one line. ``--debug`` shows
the traceback instead.
"""

from __future__ import annotations

import sys
from typing import TextIO

from pluggy import PluginValidationError

__all__ = ["UsageError", "EXIT_USAGE", "USER_ERRORS", "format_error", "report"]

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input to a command: ``message`` says what is wrong, ``hint`` what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


# Exceptions that mean "the input is wrong", not "percache is broken" (a plugin the user gave
# that pluggy refuses to register, e.g. an argument its hook does not have, is input too).
USER_ERRORS: tuple[type[Exception], ...] = (
    UsageError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
    ValueError, KeyError, ModuleNotFoundError, OSError, PluginValidationError,
)


def format_error(exc: BaseException) -> str:
    """One line: the problem, then the hint if there is one."""
    if isinstance(exc, UsageError):
        message, hint = exc.message, exc.hint or "see 'percache --help' and the README"
    else:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        message, hint = f"{text}", "run with --debug for the traceback"
    message = " ".join(str(message).split())  # one line, whatever the exception held
    return f"percache: error: {message}" + (f" (hint: {' '.join(hint.split())})" if hint else "")


def report(exc: BaseException, stream: TextIO | None = None) -> int:
    print(format_error(exc), file=stream or sys.stderr)
    return EXIT_USAGE
