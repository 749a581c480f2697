"""Entry-point autoload and its switch."""

from __future__ import annotations

import importlib.metadata as md
from typing import Any

import pytest

from percache_plugin.hooks import manager


class _EP:
    name = "fake"
    group = manager.ENTRY_POINT_GROUP
    value = "fake:Plugin"

    class _Plugin:
        pass

    def load(self) -> Any:
        return self._Plugin()


class _Dist:
    entry_points = (_EP(),)
    metadata = {"name": "fake-dist"}


@pytest.fixture
def fake_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(md, "distributions", lambda: [_Dist()])


def test_entry_points_load_unless_disabled(fake_entry_point: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(manager.AUTOLOAD_ENV, raising=False)
    pm = manager.make_plugin_manager()
    assert "fake" in [n for n, _ in pm.list_name_plugin()]

    monkeypatch.setenv(manager.AUTOLOAD_ENV, "1")
    pm = manager.make_plugin_manager()
    assert "fake" not in [n for n, _ in pm.list_name_plugin()]
