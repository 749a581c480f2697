"""A random-weight Llama offloaded to disk with accelerate, for the buffer-cache benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..buffer.offload import BufferedWeights, dispatch_buffered
from ..buffer.policies import Policy
from ..buffer.trace import Tracer

__all__ = ["llama_config", "write_offloaded", "load_offloaded"]


def llama_config(hidden: int, layers: int, vocab: int = 8192) -> object:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                       num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                       num_key_value_heads=max(1, hidden // 256), max_position_embeddings=2048)


def _model(hidden: int, layers: int) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(llama_config(hidden, layers)).eval()


def write_offloaded(folder: Path, hidden: int, layers: int) -> tuple[int, int]:
    """Save the decoder layers' weights as an accelerate offload folder; returns (parameters of
    the whole model, bytes offloaded)."""
    from accelerate.utils import offload_state_dict  # type: ignore[import-untyped]

    model = _model(hidden, layers)
    disk = {k: v for k, v in model.state_dict().items() if k.startswith("model.layers.")}
    if not (folder / "index.json").is_file():
        offload_state_dict(str(folder), disk)
    n_params = sum(p.numel() for p in model.parameters())
    return n_params, sum(v.numel() * v.element_size() for v in disk.values())


def load_offloaded(folder: Path, hidden: int, layers: int, capacity: int, policy: str | Policy,
                   tracer: Tracer | None = None) -> tuple[Any, BufferedWeights]:
    """The model with its decoder layers served from ``folder`` through a buffer cache."""
    model = _model(hidden, layers)
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu",
                  "lm_head": "cpu", **{f"model.layers.{i}": "disk" for i in range(layers)}}
    weights = BufferedWeights(folder, capacity, policy, tracer=tracer)
    return dispatch_buffered(model, device_map, weights), weights
