"""Linear layers over oneDNN-packed weights: the model's values to float rounding, the model
untouched, weights changed in place computed with the model's own kernel."""

from __future__ import annotations

import threading

import pytest
import torch

import percache_plugin as percache
from percache_plugin.decode import PackedLinears
from percache_plugin.decode.packed import packing_problem
from percache_plugin.fingerprint import model_fingerprint
from tests.helpers import SEGMENTS, baseline, tiny_pair
from tests.models import tiny_model

pytestmark = pytest.mark.skipif(bool(packing_problem(torch.nn.Linear(2, 2))),
                                reason=packing_problem(torch.nn.Linear(2, 2)) or "")


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids).logits


def test_packed_forward_gives_the_models_values_to_rounding() -> None:
    model = tiny_model("llama")
    ids = torch.arange(3, 20).view(1, -1)
    plain = _logits(model, ids)
    packed = PackedLinears(model)
    assert packed.weights == sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert packed.nbytes > 0
    with packed.active() as route:
        ours = _logits(model, ids)
    assert route.calls == packed.calls > 0
    torch.testing.assert_close(ours, plain, rtol=1e-5, atol=1e-5)
    assert torch.equal(_logits(model, ids), plain)  # outside the block: the model's own kernels


def test_the_model_is_untouched() -> None:
    model, tok = tiny_pair("llama")
    before = model_fingerprint(model, tok)
    params = {n: p.clone() for n, p in model.named_parameters()}
    packed = PackedLinears(model)
    with packed.active():
        _logits(model, torch.arange(3, 9).view(1, -1))
    assert model_fingerprint(model, tok) == before
    assert all(torch.equal(p, params[n]) for n, p in model.named_parameters())


def test_a_weight_changed_in_place_is_computed_with_the_models_kernel() -> None:
    model = tiny_model("llama")
    packed = PackedLinears(model)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(2.0)
    ids = torch.arange(3, 20).view(1, -1)
    plain = _logits(model, ids)
    with packed.active():
        ours = _logits(model, ids)
    assert packed.stale_calls > 0
    torch.testing.assert_close(ours, plain, rtol=1e-5, atol=1e-5)


def test_other_threads_are_not_routed() -> None:
    model = tiny_model("llama")
    packed = PackedLinears(model)
    ids = torch.arange(3, 20).view(1, -1)
    done = threading.Event()

    def other() -> None:
        _logits(model, ids)
        done.set()

    with packed.active() as route:
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert done.is_set() and route.calls == 0 and packed.calls == 0


def test_nothing_to_pack_is_said() -> None:
    model = tiny_model("llama", dtype=torch.bfloat16)
    assert "float32" in packing_problem(model)
    assert PackedLinears.of(model) is None
    with pytest.raises(ValueError, match="float32"):
        PackedLinears(model)


def test_drafted_decoding_with_packed_weights_keeps_the_plain_tokens() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, draft_verify_cost=(1.0,))
    plain, _ = baseline(model, pc.prompt(SEGMENTS).input_ids, max_new_tokens=24)
    gen = pc.generate(SEGMENTS, max_new_tokens=24)
    assert gen.token_ids == plain and gen.stats.drafting == "on"
    assert gen.stats.packed_linear_calls > 0
    pc.configure(draft_packed_linears=False)
    gen = pc.generate(SEGMENTS, max_new_tokens=24)
    assert gen.token_ids == plain and gen.stats.packed_linear_calls == 0
    assert not pc.engine.drafts.packed  # switched off: the copies are freed
    pc.close()


def test_the_first_forward_uses_packed_weights_only_when_they_exist() -> None:
    """An earlier answer by prefix rides along with the prompt's last token: that first forward
    computes over packed copies made earlier (a verify forward's size), but never packs itself."""
    from percache_plugin.decode import (
        DraftedDecoding,
        DraftIndex,
        DraftSchedule,
        DraftSource,
        VerifyCost,
    )
    from percache_plugin.decode.packed import PackOnDemand

    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    ids = pc.prompt(SEGMENTS).input_ids
    pc.close()
    plain, _ = baseline(model, ids, max_new_tokens=8)
    packing = PackOnDemand(model)
    for made in (False, True):
        if made:
            packing.get()
        loop = DraftedDecoding(DraftIndex([DraftSource("qa_bank", (tuple(plain),), anchored=True)], ids),
                               DraftSchedule(cost=VerifyCost((1.0,))))
        loop.linears = packing
        with torch.inference_mode():  # the prompt cached but its last token, as after a chunk hit
            cache = model(input_ids=torch.tensor([ids[:-1]]), use_cache=True).past_key_values
            out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0,
                                 past_key_values=cache, custom_generate=loop)
        assert out[0, len(ids):].tolist() == plain
        assert loop.counts.forwards == 1 and loop.counts.first_tokens == 8  # the answer in one forward
        assert (loop.counts.packed_calls > 0) == made
        assert (packing.packed is not None) == made  # not made by the first forward


@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (1, 3), (1, 4), (1, 9), (2,), (3,), (2, 1)])
def test_two_or_three_rows_are_computed_padded_to_min_rows(shape: tuple[int, ...]) -> None:
    """oneDNN computes 2-3 rows slower than 4: they are padded with zero rows, which are
    dropped again (the rows' values are the unpadded ones')."""
    from percache_plugin.decode.packed import MIN_ROWS

    layer = torch.nn.Linear(48, 100)
    packed = PackedLinears(layer)
    x = torch.randn(*shape, 48, generator=torch.Generator().manual_seed(len(shape)))
    with torch.inference_mode():
        ours = packed.linear(x, layer.weight, layer.bias)
        plain = torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert ours is not None and ours.shape == plain.shape
    torch.testing.assert_close(ours, plain, rtol=1e-5, atol=1e-5)
    rows = x.numel() // 48
    assert packed.calls == 1 and packed.padded_calls == int(1 < rows < MIN_ROWS)
    packed.min_rows = 1
    with torch.inference_mode():
        again = packed.linear(x, layer.weight, layer.bias)
    assert again is not None and packed.padded_calls == int(1 < rows < MIN_ROWS)
    torch.testing.assert_close(again, ours, rtol=1e-5, atol=1e-5)
