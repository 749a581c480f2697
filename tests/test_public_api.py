"""What ``import percache_plugin`` offers a new user."""

from __future__ import annotations

import pytest

import percache_plugin as percache


@pytest.mark.parametrize("name", ["Answer", "AddReport", "IdleReport", "DEFAULT_PLUGINS", "Config", "enable"])
def test_exported(name: str) -> None:
    assert name in percache.__all__
    assert getattr(percache, name) is not None


def test_every_name_in_all_exists() -> None:
    for name in percache.__all__:
        assert hasattr(percache, name), name


def test_describe_prints_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert percache.Config.describe() is None
    out = capsys.readouterr().out
    assert "similarity_threshold = " in out and "debug_log = " in out
    assert out.strip() == percache.Config.help_text().strip()
