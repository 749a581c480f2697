"""Model profiles: table entries resolve per model, overrides win, unknown families are guessed or refused."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest
import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedConfig,
)

from percache_plugin.attention.profile import (
    NO_ROPE,
    PROFILES,
    SHARED_ROPE,
    ModelProfile,
    resolve_profile,
    rotary_modules,
)
from percache_plugin.conformance.families import build_family
from tests.models import EXTRA_FAMILIES, TINY_FAMILIES, tiny_config_kwargs, tiny_model

_SG = ("sliding_attention", "full_attention") * 2

# family -> (model_type, positions, rotary_dims, rotate, layer_rope) for the tiny models (head_dim 16).
EXPECTED: dict[str, tuple[str, str, int | None, str, tuple[str, ...] | None]] = {
    "llama": ("llama", "rope", 16, "half", None),
    "qwen2": ("qwen2", "rope", 16, "half", None),
    "qwen3": ("qwen3", "rope", 16, "half", None),
    "mistral": ("mistral", "rope", 16, "half", None),
    # Gemma2 alternates sliding/full layers but both use the same RoPE.
    "gemma2": ("gemma2", "rope", 16, "half", None),
    "gemma3": ("gemma3_text", "rope", 16, "half", _SG),
    "phi3": ("phi3", "rope", 8, "half", None),
    "gpt_neox": ("gpt_neox", "rope", 4, "half", None),
    "gpt2": ("gpt2", "learned", None, "half", None),
    "cohere": ("cohere", "rope", 16, "interleaved", None),
    "glm": ("glm", "rope", 8, "interleaved", None),
    "cohere2": ("cohere2", "rope", 16, "interleaved", (SHARED_ROPE, SHARED_ROPE, NO_ROPE)),
    "smollm3": ("smollm3", "rope", 16, "half", (SHARED_ROPE, NO_ROPE, SHARED_ROPE)),
}


def test_expected_covers_every_tiny_family() -> None:
    assert set(EXPECTED) == set(TINY_FAMILIES) | set(EXTRA_FAMILIES)


@pytest.mark.parametrize("family", [*TINY_FAMILIES, *EXTRA_FAMILIES])
def test_table_entry_resolves_per_model(family: str) -> None:
    model = tiny_model(family)
    model_type, positions, rotary_dims, rotate, layer_rope = EXPECTED[family]
    profile = resolve_profile(model)
    assert profile.model_type == model_type
    assert model_type in PROFILES, "tiny families must be table entries, not guesses"
    assert "guessed" not in profile.notes
    assert (profile.positions, profile.rotary_dims, profile.rotate, profile.layer_rope) == (
        positions,
        rotary_dims,
        rotate,
        layer_rope,
    )


@pytest.mark.parametrize("family", [f for f in (*TINY_FAMILIES, *EXTRA_FAMILIES) if f != "gpt2"])
def test_rotary_dims_from_config_match_the_rotary_module(family: str) -> None:
    """The config-derived rotary dims agree with the frequencies the model really builds."""
    model = tiny_model(family)
    (module,) = rotary_modules(model)
    freqs = [b for name, b in module.named_buffers(recurse=False) if name.endswith("inv_freq")]
    assert freqs and all(2 * f.numel() == resolve_profile(model).rotary_dims for f in freqs)


def test_profiles_table_is_immutable_and_consistent() -> None:
    assert isinstance(PROFILES, MappingProxyType)
    with pytest.raises(TypeError):
        PROFILES["llama"] = ModelProfile("llama", "none")  # type: ignore[index]
    for model_type, profile in PROFILES.items():
        assert profile.model_type == model_type
        assert profile.rotary_dims is None and profile.layer_rope is None, (
            "model-dependent fields stay empty"
        )
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROFILES["llama"].positions = "none"  # type: ignore[misc]


def test_gemma2_deeper_model_keeps_one_rope() -> None:
    profile = resolve_profile(tiny_model("gemma2", num_hidden_layers=6))
    assert profile.layer_rope is None


def test_gemma3_layer_rope_follows_layer_types() -> None:
    model = tiny_model("gemma3", num_hidden_layers=6)
    assert resolve_profile(model).layer_rope == tuple(model.config.layer_types)


def test_smollm3_deeper_model_derives_nope_layers() -> None:
    model = tiny_model("smollm3", num_hidden_layers=4, no_rope_layer_interval=2)
    assert resolve_profile(model).layer_rope == (SHARED_ROPE, NO_ROPE, SHARED_ROPE, NO_ROPE)


@pytest.mark.parametrize(("alibi", "positions"), [(False, "rope"), (True, "none")])
def test_falcon_alibi_flag_switches_positions(alibi: bool, positions: str) -> None:
    config = AutoConfig.for_model(
        "falcon",
        vocab_size=256,
        hidden_size=64,
        num_attention_heads=4,
        num_hidden_layers=2,
        alibi=alibi,
    )
    assert resolve_profile(AutoModelForCausalLM.from_config(config)).positions == positions


def test_override_wins_over_table() -> None:
    model = tiny_model("gpt2")
    override = ModelProfile(
        "gpt2", "rope", rotary_dims=16, rotate="interleaved", layer_rope=("x",) * 3
    )
    assert resolve_profile(model, override) == override


def test_override_missing_fields_filled_from_config() -> None:
    model = tiny_model("phi3")
    resolved = resolve_profile(
        model, ModelProfile("phi3", "rope", rotate="interleaved", notes="plugin")
    )
    assert (resolved.rotate, resolved.rotary_dims, resolved.notes) == ("interleaved", 8, "plugin")
    stated = resolve_profile(model, ModelProfile("phi3", "rope", rotary_dims=16))
    assert stated.rotary_dims == 16, "a stated field is kept even when the config disagrees"


def test_override_must_be_a_profile() -> None:
    with pytest.raises(TypeError, match="ModelProfile"):
        resolve_profile(tiny_model("llama"), {"positions": "rope"})  # type: ignore[arg-type]


def test_not_a_transformers_model() -> None:
    with pytest.raises(TypeError, match="config"):
        resolve_profile(nn.Linear(2, 2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"positions": "alibi"}, "positions"),
        ({"positions": "rope", "rotate": "sideways"}, "rotate"),
        ({"positions": "rope", "rotary_dims": 7}, "rotary_dims"),
        ({"positions": "rope", "rotary_dims": 0}, "rotary_dims"),
        ({"positions": "rope", "layer_rope": ["a"]}, "layer_rope"),
        ({"positions": "learned", "rotary_dims": 8}, "only apply to 'rope'"),
    ],
)
def test_invalid_profiles_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ModelProfile("x", **kwargs)  # type: ignore[arg-type]


# --- unknown families -------------------------------------------------------------------------


class _UnknownRopeConfig(LlamaConfig):
    model_type = "percache_test_unknown_rope"


class _UnknownLearnedConfig(GPT2Config):
    model_type = "percache_test_unknown_learned"


class _MysteryConfig(PreTrainedConfig):
    model_type = "percache_test_mystery"


class _Mystery(nn.Module):
    """A model with a transformers config but no sign of how positions enter attention."""

    def __init__(self) -> None:
        super().__init__()
        self.config = _MysteryConfig()
        self.proj = nn.Linear(4, 4)


def test_unknown_family_with_rotary_module_is_guessed_rope() -> None:
    _, kwargs = tiny_config_kwargs("llama", partial_rotary_factor=0.5)
    model = LlamaForCausalLM(_UnknownRopeConfig(**kwargs))
    profile = resolve_profile(model)
    assert profile.model_type == "percache_test_unknown_rope" not in PROFILES
    assert (profile.positions, profile.rotary_dims) == ("rope", 8)
    assert "guessed" in profile.notes


def test_unknown_family_with_position_table_is_guessed_learned() -> None:
    _, kwargs = tiny_config_kwargs("gpt2")
    profile = resolve_profile(GPT2LMHeadModel(_UnknownLearnedConfig(**kwargs)))
    assert (profile.positions, profile.rotary_dims) == ("learned", None)
    assert "guessed" in profile.notes


def test_unknown_family_without_signs_is_refused() -> None:
    with pytest.raises(ValueError, match="percache_test_mystery.*override"):
        resolve_profile(_Mystery())


def test_unknown_family_override_is_accepted() -> None:
    override = ModelProfile("percache_test_mystery", "none", notes="plugin says NoPE")
    assert resolve_profile(_Mystery(), override) == override


def test_tiny_model_is_seeded_and_eval() -> None:
    a, b = tiny_model("llama", seed=3), tiny_model("llama", seed=3)
    assert not a.training
    assert all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    assert not torch.equal(a.lm_head.weight, tiny_model("llama", seed=4).lm_head.weight)
    assert tiny_model("llama", dtype=torch.bfloat16).lm_head.weight.dtype == torch.bfloat16


def test_tiny_model_rope_overrides_reach_the_config() -> None:
    scaled = tiny_model("llama", rope_parameters={"rope_type": "linear", "factor": 2.0})
    legacy = tiny_model("llama", rope_scaling={"rope_type": "linear", "factor": 2.0})
    for model in (scaled, legacy):
        assert model.config.rope_parameters["rope_type"] == "linear"
        assert model.config.rope_parameters["rope_theta"] == 10_000.0


def test_tiny_model_unknown_family() -> None:
    with pytest.raises(KeyError, match="no tiny config"):
        tiny_model("bert")


def test_layer_type_without_rope_parameters_is_nope() -> None:
    # Beam: rope_parameters maps "full_attention" to None; those layers run without positions.
    model = build_family("beam")
    kinds = list(model.config.layer_types)
    want = tuple(NO_ROPE if model.config.rope_parameters[k] is None else k for k in kinds)
    assert NO_ROPE in want and want != (NO_ROPE,) * len(kinds)
    assert resolve_profile(model).layer_rope == want


def test_longer_no_rope_layers_list_is_read_per_layer() -> None:
    # Llama 4's modeling code reads no_rope_layers[layer_idx]; a 2-layer config that keeps the
    # 48-entry default list must not fail on the extra entries.
    model = build_family("llama4_text")
    model.config.no_rope_layers = [1, 0] + [1] * 46
    layer_rope = resolve_profile(model).layer_rope
    assert layer_rope is not None and layer_rope[1] == NO_ROPE
    model.config.no_rope_layers = [1]
    with pytest.raises(ValueError, match="no_rope_layers for 2 layers"):
        resolve_profile(model)
