"""Modules import one way: a module may import its own layer and the layers below, never above
(``TYPE_CHECKING`` and function-local imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import percache_plugin

ROOT = Path(percache_plugin.__file__).parent

# Lowest first. A module's layer is the one of its longest matching prefix.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("config", "cache_arg", "segments", "stats", "fingerprint", "sqlite_tx", "filemodes", "best_effort",
     "rag.guards", "rag.abbreviations", "rag.meaning", "rag.roles", "rag.antonyms", "rag.wordnet", "kv.recompute",
     "predict.parse",
     "predict.templates", "prompts",
     "buffer.policies", "buffer.llm_aware", "buffer.adaptive", "buffer.cache", "buffer.trace", "buffer.workloads"),
    ("kv", "attention", "buffer", "rag", "predict", "idle", "forget_journal", "decode", "session.state",
     "turnlog", "memory"),
    ("hooks",),
    ("reuse", "request", "plugins", "buffer.plugin", "buffer.trace_plugin"),
    ("engine",),
    ("assistant", "session", "memory.api", "memory.plugin", "memory.idle", "memory.session_facts", "personas"),
    ("handle",),
    ("", "cli", "cli_errors", "admin", "memory.cli", "turnlog.cli", "demo", "bench", "conformance", "bundled", "plugin_list"),
)
HANDLE_LAYER = 7


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".") or p == "") and len(p) > best:
                best, rank = len(p), i
    return rank


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(imported module relative to the package, names) for every import of the package."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith("percache_plugin"):
                target = node.module.removeprefix("percache_plugin").lstrip(".")
            else:
                continue
            found.append((target, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("percache_plugin"):
                    found.append((a.name.removeprefix("percache_plugin").lstrip("."), []))
    return found


def test_every_module_has_a_layer() -> None:
    assert all(layer_of(m) >= 0 for m in modules())


def test_no_module_imports_upward() -> None:
    bad = []
    for name, path in modules().items():
        for target, _ in imports_of(name, path):
            if layer_of(target) > layer_of(name):
                bad.append(f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})")
    assert not bad, "\n".join(bad)


def test_nothing_below_the_handle_names_it() -> None:
    bad = [f"{name} imports PerCache" for name, path in modules().items()
           if layer_of(name) < HANDLE_LAYER
           for _, names in imports_of(name, path) if "PerCache" in names]
    assert not bad, bad


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    fake = tmp_path / "cache.py"
    fake.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from ..handle import PerCache\n")
    [(target, names)] = imports_of("kv.cache", fake)
    assert target == "handle" and names == ["PerCache"]
    assert layer_of(target) > layer_of("kv.cache")
