"""Prompt templates of the prediction layer, as files users can override."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["TEMPLATE_NAMES", "load_template"]

TEMPLATE_NAMES = ("abstract", "knowledge_questions", "history_questions", "memory_facts",
                  "memory_turn_facts")


def load_template(name: str, override_dir: Path | str | None = None) -> str:
    """The template ``name``: ``<override_dir>/<name>.txt`` if it exists, else the bundled one."""
    if name not in TEMPLATE_NAMES:
        raise ValueError(f"unknown prompt template {name!r}; known: {TEMPLATE_NAMES}")
    if override_dir is not None:
        path = Path(override_dir).expanduser() / f"{name}.txt"
        if path.is_file():
            return path.read_text(encoding="utf-8").strip()
    return resources.files("percache_plugin.prompts").joinpath(f"{name}.txt").read_text("utf-8").strip()
