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


def test_help_imports_no_command_module_nor_torch() -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom percache_plugin import cli\ntry:\n    cli.main(['--help'])\n"
            "except SystemExit:\n    pass\n"
            "loaded = [m for m in sys.modules if m in ('torch', 'transformers') or "
            "m.startswith(('percache_plugin.bench', 'percache_plugin.demo', 'percache_plugin.conformance'))]\n"
            "print('LOADED', loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LOADED []" in out, out


def test_a_command_loads_only_its_module(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser(["bench", "qa", "--help"])
    bench = next(a for a in parser._subparsers._group_actions).choices["bench"]  # type: ignore[union-attr]
    loaded = {n for n, p in next(a for a in bench._subparsers._group_actions).choices.items()  # type: ignore[union-attr]
              if p.get_default("run") is not None}
    assert loaded == {"qa"}
