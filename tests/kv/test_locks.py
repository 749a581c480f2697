"""The store's advisory locks."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from percache_plugin.kv.locks import DirectoryLock


def test_a_store_waiting_for_a_maintenance_command_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kv = tmp_path / "kv"
    kv.mkdir()
    admin = os.open(kv / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(admin, fcntl.LOCK_EX)  # as store remove/purge/clear and memory forget hold it
    got: list[DirectoryLock] = []
    caplog.set_level(logging.WARNING, logger="percache")
    opener = threading.Thread(target=lambda: got.append(DirectoryLock(kv)))
    opener.start()
    deadline = time.monotonic() + 10
    while "maintenance command" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "maintenance command" in caplog.text and str(tmp_path) in caplog.text
    assert opener.is_alive() and not got  # still waiting: the message came before the lock
    os.close(admin)
    opener.join(10)
    assert got and not got[0].exclusive
    got[0].close()


def test_no_message_when_another_store_only_shares_the_directory(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kv = tmp_path / "kv"
    kv.mkdir()
    first = DirectoryLock(kv)
    first.share()
    caplog.set_level(logging.WARNING, logger="percache")
    second = DirectoryLock(kv)
    assert first.exclusive is False and second.exclusive is False
    assert "maintenance" not in caplog.text
    second.close()
    first.close()
