"""Small modules with one job: no module of the package is over ``LIMIT`` lines, except the
tables listed in ``TABLES`` (documentation and field tables, named in docs/ARCHITECTURE.md)."""

from __future__ import annotations

from pathlib import Path

import percache_plugin

ROOT = Path(percache_plugin.__file__).parent
LIMIT = 350

# Tables, not logic: one documented hook spec after another, one documented Config field after
# another. Splitting them would scatter what a reader looks up in one place.
TABLES = frozenset({"hooks/specs.py", "config.py"})


def too_long(root: Path, limit: int, allowed: frozenset[str]) -> list[str]:
    """``"path: n lines"`` for every ``*.py`` under ``root`` over ``limit`` lines and not allowed."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit and rel not in allowed:
            out.append(f"{rel}: {n} lines")
    return out


def test_no_module_over_the_limit() -> None:
    bad = too_long(ROOT, LIMIT, TABLES)
    assert not bad, f"modules over {LIMIT} lines (split them by job, or name a table in TABLES):\n" + "\n".join(bad)


def test_the_tables_exist() -> None:
    assert all((ROOT / rel).is_file() for rel in TABLES), "a table in TABLES is gone: drop it from the list"


def test_a_long_module_is_caught(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "table.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * LIMIT)
    assert too_long(tmp_path, LIMIT, frozenset({"table.py"})) == [f"sub/long.py: {LIMIT + 1} lines"]
