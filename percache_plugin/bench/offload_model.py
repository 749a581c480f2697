"""A random-weight Llama offloaded to disk with accelerate, for the buffer-cache benchmarks.

:func:`write_offloaded` saves the decoder layers as an accelerate offload folder (``index.json``
and one ``.dat`` per tensor) and the rest (embeddings, final norm, LM head) beside it in
``resident.safetensors``, with ``model.json`` naming the shape and dtype. :func:`load_offloaded`
builds the model with empty weights (``accelerate.init_empty_weights``), loads the resident part
and attaches the offloaded layers through a buffer cache, so the whole model is never in RAM
(a 1B-parameter model loads in seconds, within a few hundred MB besides the cache)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..buffer.offload import BufferedWeights, dispatch_buffered
from ..buffer.policies import Policy
from ..buffer.trace import Tracer

__all__ = ["llama_config", "write_offloaded", "load_offloaded", "DTYPES"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""The weight dtypes a benchmark model may be written in, by name."""


def llama_config(hidden: int, layers: int, vocab: int = 8192) -> object:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                       num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                       num_key_value_heads=max(1, hidden // 256), max_position_embeddings=2048)


def _is_offloaded(name: str) -> bool:
    return name.startswith("model.layers.")


def write_offloaded(folder: Path, hidden: int, layers: int, dtype: str = "float32") -> tuple[int, int]:
    """Write the model to ``folder`` unless it already holds this one (``model.json``); returns
    (parameters of the whole model, bytes offloaded). ValueError if ``folder`` holds another."""
    from accelerate.utils import offload_state_dict  # type: ignore[import-untyped]
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    want = {"hidden": hidden, "layers": layers, "dtype": dtype}
    meta_path = folder / "model.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in want} != want:
            raise ValueError(f"{folder} holds another model ({meta}); expected {want}")
        return int(meta["parameters"]), int(meta["offloaded_bytes"])
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(llama_config(hidden, layers), dtype=DTYPES[dtype]).eval()
    state = model.state_dict()
    disk = {k: v for k, v in state.items() if _is_offloaded(k)}
    offload_state_dict(str(folder), disk)
    save_file({k: v.contiguous() for k, v in state.items() if not _is_offloaded(k)},
              str(folder / "resident.safetensors"))
    n_params = sum(p.numel() for p in model.parameters())
    offloaded = sum(v.numel() * v.element_size() for v in disk.values())
    meta_path.write_text(json.dumps({**want, "parameters": n_params, "offloaded_bytes": offloaded}))
    return n_params, offloaded


def load_offloaded(folder: Path, hidden: int, layers: int, capacity: int, policy: str | Policy,
                   tracer: Tracer | None = None) -> tuple[Any, BufferedWeights]:
    """The model of ``folder`` with its decoder layers served through a buffer cache of
    ``capacity`` bytes under ``policy``."""
    from accelerate import init_empty_weights  # type: ignore[import-untyped]
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    meta = json.loads((folder / "model.json").read_text())
    if (meta["hidden"], meta["layers"]) != (hidden, layers):
        raise ValueError(f"{folder} holds a model of hidden {meta['hidden']}, {meta['layers']} "
                         f"layers; expected {hidden}, {layers}")
    with init_empty_weights():  # parameters on the meta device, buffers (RoPE) real
        model = AutoModelForCausalLM.from_config(llama_config(hidden, layers),
                                                 dtype=DTYPES[meta["dtype"]]).eval()
    model.load_state_dict(load_file(str(folder / "resident.safetensors")), strict=False, assign=True)
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu",
                  "lm_head": "cpu", **{f"model.layers.{i}": "disk" for i in range(layers)}}
    weights = BufferedWeights(folder, capacity, policy, tracer=tracer)
    return dispatch_buffered(model, device_map, weights), weights
