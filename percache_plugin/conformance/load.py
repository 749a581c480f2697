"""Loading the model under test: a path or hub id (offline), a GGUF file, the bundled SmolLM2,
or a built-in tiny family (``tiny:llama``)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from .tiny import TINY_FAMILIES, TINY_MIN_AGREEMENT, byte_tokenizer, tiny_model

__all__ = ["BUILTIN_MODELS", "DTYPES", "SMOLLM2", "TINY_PREFIX", "default_min_agreement", "is_tiny",
           "load_model"]

TINY_PREFIX = "tiny:"
SMOLLM2 = "smollm2"
BUILTIN_MODELS: tuple[str, ...] = (*(TINY_PREFIX + f for f in TINY_FAMILIES), SMOLLM2)
"""The default set: nine tiny random families and SmolLM2-135M-Instruct from its GGUF."""
DTYPES: Mapping[str, torch.dtype | str] = MappingProxyType({
    "auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16,
    "float16": torch.float16,
})


def is_tiny(name: str) -> bool:
    return name.startswith(TINY_PREFIX)


def default_min_agreement(name: str) -> float | None:
    """The shifted-reuse threshold a built-in model needs (None: the suite's default)."""
    return TINY_MIN_AGREEMENT if is_tiny(name) else None


def load_model(name: str, *, gguf_file: str | None = None, dtype: str = "float32",
               trust_remote_code: bool = False, status: bool = False) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``name``: ``tiny:<family>``, ``smollm2``, or a local path /
    cached hub id for ``AutoModelForCausalLM`` and ``AutoTokenizer`` (nothing is downloaded
    when ``HF_HUB_OFFLINE=1``, which the CLI sets). ``status``: one percache status line on
    standard error while a real model loads (:func:`~percache_plugin.loading.loading_status`).

    :raises ValueError: unknown dtype or tiny family.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    torch_dtype = DTYPES[dtype]
    if is_tiny(name):
        family = name.removeprefix(TINY_PREFIX)
        if family not in TINY_FAMILIES:
            raise ValueError(f"no tiny family {family!r}; known: {', '.join(TINY_FAMILIES)}")
        as_dtype = torch.float32 if torch_dtype == "auto" else torch_dtype
        assert isinstance(as_dtype, torch.dtype)
        return tiny_model(family, dtype=as_dtype), byte_tokenizer()
    if name == SMOLLM2 and gguf_file is None:
        from ..bundled import load_smollm2

        return load_smollm2(torch.float32 if torch_dtype == "auto" else torch_dtype,  # type: ignore[arg-type]
                            status=status)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..loading import loading_status

    extra: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if gguf_file is not None:
        extra["gguf_file"] = gguf_file
    where = str(Path(name).expanduser().resolve()) if Path(name).expanduser().exists() \
        else f"the Hugging Face cache ({name})"
    with loading_status(name, where) if status else contextlib.nullcontext():
        tokenizer = AutoTokenizer.from_pretrained(name, **extra)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, **extra)
    return model.eval(), tokenizer
