"""Every file and directory a handle's store creates is owner-only (defect 8), whatever the
umask, and an existing store directory readable by others is tightened with a warning."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

import percache_plugin as percache
from tests.helpers import tiny_pair


def test_a_used_store_holds_only_owner_only_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    root.mkdir()
    os.chmod(root, 0o755)
    old = os.umask(0o022)
    try:
        with caplog.at_level(logging.WARNING, logger="percache"):
            pc = percache.enable(*tiny_pair("llama"), store=root, embedder="hash",
                                 predict="history", prediction_quiet_s=0.0)
        try:
            pc.add_documents(["Ana: the choir rehearsal moved to Friday at 6 pm."], scope="u")
            pc.ask("When is the choir rehearsal?", scope="u", max_new_tokens=3)
            pc.idle(max_tasks=2)
        finally:
            pc.close()
    finally:
        os.umask(old)
    assert any("accessible by other users" in r.message for r in caplog.records)
    modes = {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}
    modes["."] = stat.S_IMODE(root.stat().st_mode)
    loose = {p: oct(m) for p, m in modes.items()
             if m != (0o700 if (root / p).is_dir() else 0o600)}
    assert not loose, loose
    assert "percache.sqlite3-wal" in modes or "percache.sqlite3" in modes
