"""RoPE phase shift against the model's own RoPE at shifted positions.

Under a uniform shift of every position id by ``d`` a RoPE model's attention sees the same
relative positions, so every layer's hidden states are unchanged (up to float rounding) and
the post-RoPE keys computed at ``p + d`` equal the keys computed at ``p`` rotated by ``d``. The
tests run the same token ids at ``position_ids = arange(T) + p`` and ``+ p + d`` with a fresh
``DynamicCache()`` (full keys on sliding layers too) and compare every layer.

Errors are measured relative to the reference keys' scale, ``max(1, max|K|)``: with q/k norms
(Qwen3, Gemma3) keys reach |K| ~ 3, and at position ~4100 the model's own fp32 phase
``position * inv_freq`` is rounded by up to 2.4e-4 rad, which alone gives ~1e-4 absolute.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import pytest
import torch
from transformers import DynamicCache, PreTrainedConfig, PreTrainedModel

from percache_plugin.attention.profile import NO_ROPE, ModelProfile
from percache_plugin.attention.rope import NotShiftable, RopeShifter, shift_support
from tests.models import EXTRA_FAMILIES, TINY_FAMILIES, tiny_model

T = 16  # chunk length
P = 7  # offset the chunk is first computed at
DELTAS = (1, 100, 4096)
FP32_TOL = 1e-4
BF16_TOL = 5e-2

SCALED: Mapping[str, dict[str, Any]] = MappingProxyType(
    {
        "linear": {"rope_type": "linear", "factor": 2.0},
        "llama3": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 256,
        },
        "yarn": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 256},
    }
)
CASES: tuple[str, ...] = (
    *(f for f in TINY_FAMILIES if f != "gpt2"),
    *EXTRA_FAMILIES,
    *(f"llama-{name}" for name in SCALED),
)


def build(case: str, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    family, _, scaling = case.partition("-")
    overrides = {"rope_parameters": dict(SCALED[scaling])} if scaling else {}
    return tiny_model(family, dtype=dtype, **overrides)


def rope_keys(
    model: PreTrainedModel, ids: torch.Tensor, positions: torch.Tensor
) -> list[torch.Tensor]:
    """Post-RoPE keys ``[kv_heads, T, head_dim]`` of every layer for ``ids`` at ``positions``."""
    cache = DynamicCache()
    with torch.no_grad():
        model(ids[None], position_ids=positions[None], past_key_values=cache, use_cache=True)
    return [layer.keys[0] for layer in cache.layers]


def rel_errors(got: list[torch.Tensor], want: list[torch.Tensor]) -> list[float]:
    """Per layer, ``max|got - want| / max(1, max|want|)``."""
    return [
        ((g.float() - w.float()).abs().max() / w.float().abs().max().clamp(min=1.0)).item()
        for g, w in zip(got, want, strict=True)
    ]


class Case(NamedTuple):
    model: PreTrainedModel
    shifter: RopeShifter
    ids: torch.Tensor
    at_p: list[torch.Tensor]


def make_case(case: str, dtype: torch.dtype) -> Case:
    model = build(case, dtype)
    ids = torch.randint(
        3, model.config.vocab_size, (T,), generator=torch.Generator().manual_seed(1)
    )
    return Case(
        model, RopeShifter.from_model(model), ids, rope_keys(model, ids, torch.arange(T) + P)
    )


@pytest.fixture(scope="module", params=CASES)
def fp32_case(request: pytest.FixtureRequest) -> Case:
    return make_case(request.param, torch.float32)


@pytest.fixture(scope="module", params=CASES)
def bf16_case(request: pytest.FixtureRequest) -> Case:
    return make_case(request.param, torch.bfloat16)


def shifted_errors(case: Case, d: int, shifter: RopeShifter | None = None) -> list[float]:
    shifter = shifter or case.shifter
    at_pd = rope_keys(case.model, case.ids, torch.arange(T) + P + d)
    return rel_errors([shifter.shift(k, i, d) for i, k in enumerate(case.at_p)], at_pd)


@pytest.mark.parametrize("d", DELTAS)
def test_fp32_shift_matches_rope_at_shifted_positions(fp32_case: Case, d: int) -> None:
    errors = shifted_errors(fp32_case, d)
    assert max(errors) <= FP32_TOL, f"per-layer relative errors {errors}"
    unshifted = rel_errors(
        fp32_case.at_p, rope_keys(fp32_case.model, fp32_case.ids, torch.arange(T) + P + d)
    )
    with_rope = [
        u for u, r in zip(unshifted, fp32_case.shifter.layer_rope, strict=True) if r != NO_ROPE
    ]
    assert min(with_rope) > 100 * FP32_TOL, "positions must matter, or this test could not fail"


@pytest.mark.parametrize("d", (100, 4096))
def test_bf16_shift_matches_rope_at_shifted_positions(bf16_case: Case, d: int) -> None:
    errors = shifted_errors(bf16_case, d)
    assert max(errors) <= BF16_TOL, f"per-layer relative errors {errors}"


@pytest.mark.parametrize("case", ["llama", "gemma3", "phi3", "cohere"])
def test_negative_delta_moves_back(case: str) -> None:
    c = make_case(case, torch.float32)
    at_pd = rope_keys(c.model, c.ids, torch.arange(T) + P + 100)
    back = [c.shifter.shift(k, i, -100) for i, k in enumerate(at_pd)]
    assert max(rel_errors(back, c.at_p)) <= FP32_TOL


@pytest.mark.parametrize("case", ["llama", "gemma3", "phi3", "gpt_neox", "glm"])
def test_per_token_deltas(case: str) -> None:
    """Layer 0's keys depend only on token and position, so any per-token move is checkable there."""
    c = make_case(case, torch.float32)
    deltas = torch.randint(-P, 3000, (T,), generator=torch.Generator().manual_seed(2))
    moved = rope_keys(c.model, c.ids, torch.arange(T) + P + deltas)
    assert rel_errors([c.shifter.shift(c.at_p[0], 0, deltas)], moved[:1])[0] <= FP32_TOL
    same = torch.full((T,), 100)
    for layer, k in enumerate(c.at_p):
        torch.testing.assert_close(
            c.shifter.shift(k, layer, same), c.shifter.shift(k, layer, 100), rtol=0, atol=0
        )


def test_batched_keys_and_dtype_and_input_untouched() -> None:
    c = make_case("gemma3", torch.float32)
    batch = torch.stack([c.at_p[1], c.at_p[1] * 2])
    before = batch.clone()
    out = c.shifter.shift(batch, 1, 50)
    assert out.shape == batch.shape and out.dtype == batch.dtype
    torch.testing.assert_close(out[1], c.shifter.shift(c.at_p[1] * 2, 1, 50))
    assert torch.equal(batch, before)
    half = c.shifter.shift(batch.to(torch.float16), 1, 50)
    assert half.dtype == torch.float16 and half.shape == batch.shape


def test_nope_layers_are_left_unchanged() -> None:
    c = make_case("smollm3", torch.float32)
    assert c.shifter.layer_rope[1] == NO_ROPE
    assert torch.equal(c.shifter.shift(c.at_p[1], 1, 4096), c.at_p[1])
    assert not torch.equal(c.shifter.shift(c.at_p[0], 0, 4096), c.at_p[0])


def test_snapshot_ignores_later_changes_to_the_rotary_module() -> None:
    c = make_case("llama", torch.float32)
    expected = c.shifter.shift(c.at_p[0], 0, 100)
    with torch.no_grad():
        c.model.model.rotary_emb.inv_freq.mul_(3.0)
    assert torch.equal(c.shifter.shift(c.at_p[0], 0, 100), expected)


def test_shift_support_reports_shiftable() -> None:
    assert shift_support(build("gemma3")) == (True, "")


# --- not shiftable ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_fn", "match"),
    [
        (lambda: tiny_model("gpt2"), "learned"),
        (
            lambda: tiny_model("llama", rope_parameters={"rope_type": "dynamic", "factor": 2.0}),
            "dynamic NTK",
        ),
        (
            lambda: tiny_model(
                "phi3",
                rope_parameters={
                    "rope_type": "longrope",
                    "short_factor": [1.0] * 4,
                    "long_factor": [2.0] * 4,
                },
                original_max_position_embeddings=256,
            ),
            "longrope",
        ),
    ],
    ids=["gpt2", "dynamic", "longrope"],
)
def test_not_shiftable_with_reason(model_fn: Any, match: str) -> None:
    model = model_fn()
    with pytest.raises(NotShiftable, match=match) as info:
        RopeShifter.from_model(model)
    assert match in info.value.reason
    ok, reason = shift_support(model)
    assert not ok and match in reason


def test_unknown_rope_type_is_not_shiftable() -> None:
    model = tiny_model("llama")
    model.config.rope_parameters["rope_type"] = (
        "mystery"  # a future RoPE type this code has not seen
    )
    with pytest.raises(NotShiftable, match="unknown rope_type 'mystery'"):
        RopeShifter.from_model(model)


def test_rope_table_without_inv_freq_is_not_shiftable() -> None:
    model = tiny_model("llama")
    override = ModelProfile("llama", "rope", layer_rope=("other",) * 3)
    with pytest.raises(NotShiftable, match="other_inv_freq"):
        RopeShifter.from_model(model, override)


class _MysteryConfig(PreTrainedConfig):
    model_type = "percache_test_mystery"


class _Mystery(torch.nn.Module):
    """Has a transformers config but no rotary module, ALiBi flag or position table."""

    def __init__(self) -> None:
        super().__init__()
        self.config = _MysteryConfig()


def test_unknown_family_is_not_shiftable_with_reason() -> None:
    ok, reason = shift_support(_Mystery())
    assert not ok and "cannot tell how positions enter attention" in reason
    with pytest.raises(TypeError, match="config"):
        shift_support(torch.nn.Linear(2, 2))


def test_all_nope_override_is_not_shiftable() -> None:
    with pytest.raises(NotShiftable, match="no layer applies RoPE"):
        RopeShifter.from_model(
            tiny_model("llama"), ModelProfile("llama", "rope", layer_rope=(NO_ROPE,) * 3)
        )


def test_override_disagreeing_with_rotary_module_is_refused() -> None:
    with pytest.raises(NotShiftable, match="16 rotary dims.*4 frequencies"):
        RopeShifter.from_model(tiny_model("phi3"), ModelProfile("phi3", "rope", rotary_dims=16))


@pytest.mark.parametrize(
    ("key", "layer", "delta", "error"),
    [
        (torch.zeros(T, 16), 0, 1, ValueError),
        (torch.zeros(2, T, 16, dtype=torch.int32), 0, 1, ValueError),
        (torch.zeros(2, T, 8), 0, 1, ValueError),
        (torch.zeros(2, T, 16), 3, 1, IndexError),
        (torch.zeros(2, T, 16), 0, torch.ones(T - 1, dtype=torch.long), ValueError),
        (torch.zeros(2, T, 16), 0, torch.ones(T), ValueError),
        (torch.zeros(2, T, 16), 0, 1.5, ValueError),
    ],
)
def test_bad_input_is_refused(
    key: torch.Tensor, layer: int, delta: Any, error: type[Exception]
) -> None:
    shifter = RopeShifter.from_model(tiny_model("llama"))
    with pytest.raises(error):
        shifter.shift(key, layer, delta)


# --- negative controls: a wrong shifter must fail the same comparison --------------------------


def test_control_wrong_rotary_dims_exceeds_tolerance() -> None:
    c = make_case("llama", torch.float32)
    wrong = dataclasses.replace(
        c.shifter,
        rotary_dims=8,
        inv_freq=MappingProxyType({k: f[:4] for k, f in c.shifter.inv_freq.items()}),
    )
    for d in DELTAS:
        assert min(shifted_errors(c, d, wrong)) > 100 * FP32_TOL


def test_control_wrong_rotate_layout_exceeds_tolerance() -> None:
    c = make_case("llama", torch.float32)
    wrong = RopeShifter.from_model(c.model, ModelProfile("llama", "rope", rotate="interleaved"))
    for d in DELTAS:
        assert min(shifted_errors(c, d, wrong)) > 100 * FP32_TOL


def test_control_one_theta_for_all_gemma3_layers_exceeds_tolerance() -> None:
    c = make_case("gemma3", torch.float32)
    wrong = dataclasses.replace(c.shifter, layer_rope=("full_attention",) * 4)
    errors = shifted_errors(c, 100, wrong)
    assert errors[1] <= FP32_TOL and errors[3] <= FP32_TOL  # full-attention layers are right
    assert min(errors[0], errors[2]) > 100 * FP32_TOL  # sliding layers need the local theta
