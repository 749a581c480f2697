"""The fingerprint of a model offloaded with accelerate hashes the offloaded weights.

Between forwards accelerate leaves ``meta`` tensors in the offloaded modules; a fingerprint of
those (dtype and shape) gave two models with different offloaded weights one identity, and the
K/V one had stored was served to the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from percache_plugin.fingerprint.tracker import ModelFingerprint, model_fingerprint
from tests.helpers import SEGMENTS, tiny_pair

accelerate = pytest.importorskip("accelerate")

GEN = {"max_new_tokens": 6, "do_sample": False}
LAYERS = 2
DEVICE_MAP = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": "cpu",
              **{f"model.layers.{i}": "disk" for i in range(LAYERS)}}


def _pair(layers_seed: int) -> tuple[Any, Any]:
    """One resident part (seed 0), decoder layers drawn from ``layers_seed``."""
    model, tok = tiny_pair("llama", num_hidden_layers=LAYERS, initializer_range=0.5)
    other, _ = tiny_pair("llama", num_hidden_layers=LAYERS, initializer_range=0.5, seed=layers_seed)
    model.load_state_dict({k: v for k, v in other.state_dict().items() if k.startswith("model.layers.")},
                          strict=False)
    return model, tok


def _offloaded(layers_seed: int, folder: Path) -> tuple[Any, Any]:
    from accelerate import dispatch_model

    model, tok = _pair(layers_seed)
    return dispatch_model(model, DEVICE_MAP, offload_dir=str(folder)), tok


def test_offloaded_weights_are_part_of_the_fingerprint(tmp_path: Path) -> None:
    resident, tok = _pair(1)
    a, _ = _offloaded(1, tmp_path / "a")
    b, _ = _offloaded(2, tmp_path / "b")
    assert model_fingerprint(a, tok) != model_fingerprint(b, tok)
    assert model_fingerprint(a, tok) == model_fingerprint(resident, tok)  # the same bytes in use


def test_forwards_leave_it_and_a_rewritten_file_changes_it(tmp_path: Path) -> None:
    from accelerate.utils import offload_state_dict

    from percache_plugin.buffer.offload import BufferedWeights, dispatch_buffered

    model, tok = _pair(1)
    disk = {k: v for k, v in model.state_dict().items() if k.startswith("model.layers.")}
    offload_state_dict(str(tmp_path), disk)
    dispatch_buffered(model, DEVICE_MAP, BufferedWeights(tmp_path, 1 << 30, "lru"))
    fp = ModelFingerprint(model, tok)
    first = fp.value
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))  # the hooks put new meta tensors in place
    assert fp.current() == first and fp.stats.tensors_rehashed == 0
    other, _ = _pair(2)
    offload_state_dict(str(tmp_path), {k: v for k, v in other.state_dict().items() if k.startswith("model.layers.")})
    assert fp.current() == model_fingerprint(other, tok) != first


def test_a_store_shared_by_two_offloaded_models_serves_each_its_own_kv(tmp_path: Path) -> None:
    answers = []
    for seed in (1, 2):
        model, tok = _offloaded(seed, tmp_path / f"o{seed}")
        pc = percache.enable(model, tok, store=tmp_path / "store")
        got = pc.generate(SEGMENTS, **GEN).token_ids  # the second model's: the first's K/V?
        with pc.disabled():
            plain = pc.generate(SEGMENTS, **GEN).token_ids
        assert got == plain
        answers.append(plain)
        pc.close()
    assert answers[0] != answers[1]  # the models tell apart: K/V of one would show in the other


def test_requests_after_forwards_under_inference_mode(tmp_path: Path) -> None:
    # accelerate's hooks leave meta tensors made under inference mode, which have no version
    # counter: probing one raised at the next request
    model, tok = _offloaded(1, tmp_path / "o")
    pc = percache.enable(model, tok, store=tmp_path / "store")
    got = [pc.generate(SEGMENTS, **GEN).token_ids for _ in range(3)]
    with pc.disabled():
        assert got == [pc.generate(SEGMENTS, **GEN).token_ids] * 3
    pc.close()


def test_weights_offloaded_to_ram_are_probed_by_their_tensor(tmp_path: Path) -> None:
    # cpu offload (a GPU model's "cpu" entries): the hooks load from a state dict in RAM
    from accelerate.hooks import attach_align_device_hook_on_blocks
    from accelerate.utils.offload import OffloadedWeightsLoader

    model, tok = _pair(1)
    before = model_fingerprint(model, tok)
    held = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("model.layers.")}
    for name in held:
        module_name, _, tensor = name.rpartition(".")
        setattr(model.get_submodule(module_name), tensor, torch.nn.Parameter(torch.empty_like(held[name], device="meta")))
    attach_align_device_hook_on_blocks(
        model, execution_device={n: "cpu" for n in DEVICE_MAP} | {"": "cpu"},
        offload={n: d == "disk" for n, d in DEVICE_MAP.items()}, offload_buffers=False,
        weights_map=OffloadedWeightsLoader(state_dict=held))
    fp = ModelFingerprint(model, tok)
    assert fp.value == before
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))
    assert fp.current() == before and fp.stats.tensors_rehashed == 0
    with torch.no_grad():
        held["model.layers.0.mlp.up_proj.weight"].mul_(2)
    assert fp.current() != before and fp.stats.tensors_rehashed == 1
