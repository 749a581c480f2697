"""Tiny real peft LoRA adapters on the tiny Llama, saved to directories, and a reference model
that runs plain ``model.generate`` under one of them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import baseline, tiny_pair

peft = pytest.importorskip("peft")


def save_lora(model: Any, path: Path, seed: int) -> Path:
    """A LoRA with random A and B (``init_lora_weights=False``: it changes the outputs) on the
    attention and MLP projections of a copy of ``model``, saved to ``path``."""
    config = peft.LoraConfig(r=4, lora_alpha=32, init_lora_weights=False, task_type="CAUSAL_LM",
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft.get_peft_model(copy.deepcopy(model), config).save_pretrained(str(path))
    return path


def llama_with_loras(tmp: Path) -> tuple[Any, Any, dict[str, Path], Any]:
    """The tiny Llama, its tokenizer, two adapter directories ``a`` and ``b``, and a separate
    reference copy with both loaded (``reference.set_adapter(name)``)."""
    model, tok = tiny_pair("llama")
    dirs = {"a": save_lora(model, tmp / "lora-a", 1), "b": save_lora(model, tmp / "lora-b", 2)}
    reference = peft.PeftModel.from_pretrained(copy.deepcopy(model), str(dirs["a"]), adapter_name="a")
    reference.load_adapter(str(dirs["b"]), adapter_name="b")
    reference.eval()
    return model, tok, dirs, reference


def generate_under(reference: Any, adapter: str | None, ids: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """Plain greedy generate of the reference model under ``adapter`` (None: base model)."""
    if adapter is None:
        with reference.disable_adapter():
            return baseline(reference, ids, n)
    reference.set_adapter(adapter)
    return baseline(reference, ids, n)
