"""Owner-only files and directories for everything a store writes (0700 / 0600).

Store contents are personal (documents, questions, answers, K/V of both): nobody but the
owner may read them. Modes are set explicitly rather than through the umask, so they hold
whatever the process umask is. A directory that already exists with group or other
permissions is tightened to 0700 with a warning naming it (the store never loosens a mode).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "private_dir", "private_file", "tighten"]

log = logging.getLogger("percache")

DIR_MODE = 0o700
FILE_MODE = 0o600


def tighten(path: Path, mode: int, *, warn: bool = True) -> None:
    """Remove group/other permissions of an existing ``path`` (chmod to ``mode``)."""
    try:
        current = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return
    if current & 0o077:
        if warn:
            log.warning("percache: %s was accessible by other users (mode %o); set to %o",
                        path, current, mode)
        os.chmod(path, mode)


def private_dir(path: Path) -> Path:
    """Create ``path`` and missing parents as 0700 directories; tighten it if it exists.

    Raises ValueError when ``path`` (or a parent) exists and is not a directory, and
    PermissionError when it cannot be created or written, naming the path.
    """
    if path.exists() and not path.is_dir():
        raise ValueError(f"store path {str(path)!r} exists and is not a directory")
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        for d in reversed(missing):
            try:
                d.mkdir(mode=DIR_MODE)
            except FileExistsError:
                if not d.is_dir():
                    raise
            os.chmod(d, DIR_MODE)  # mkdir's mode is filtered by the umask
    except (NotADirectoryError, FileExistsError) as exc:
        raise ValueError(f"cannot create store directory {str(path)!r}: {exc}") from None
    except PermissionError as exc:
        raise PermissionError(f"cannot create store directory {str(path)!r}: {exc}") from None
    tighten(path, DIR_MODE)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(f"store directory {str(path)!r} is not writable")
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty if missing, as 0600; tighten an existing file.

    An existing file is never opened: closing any descriptor of a file drops every POSIX lock
    this process holds on it, so opening and closing a database that another connection of
    this process has open would drop that connection's SQLite locks. Another process closing
    its last connection would then take the database as unused, check the WAL into it and
    delete it while this process still writes there: those writes are lost."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        pass
    else:
        os.close(fd)
    tighten(path, FILE_MODE)
