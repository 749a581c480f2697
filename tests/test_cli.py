"""The console script: every registered command module exists and parses."""

from __future__ import annotations

import importlib

import pytest

from percache_plugin import cli


@pytest.mark.parametrize("module", sorted({m for m, _ in (*cli.COMMANDS.values(), *cli.BENCHMARKS.values())}))
def test_every_command_module_imports(module: str) -> None:
    mod = importlib.import_module(module)
    assert callable(mod.add_arguments) and callable(mod.run)


def test_help_and_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    assert "bench" in capsys.readouterr().out
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "percache_plugin.plugins.builtin:DefaultAttention" in out and "percache_attention" in out


def test_unknown_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["frobnicate"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
