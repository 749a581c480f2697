"""Per-family facts about how positions enter attention, as data keyed by ``model_type``.

:data:`PROFILES` says, for each known family, whether keys carry RoPE, learned absolute
positions or nothing, and how RoPE pairs the head dims. :func:`resolve_profile` fills in what
depends on the particular model (rotary dims from ``head_dim`` and the partial rotary factor,
per-layer RoPE from ``layer_types``), lets a plugin's override win, and guesses (saying so in
``notes``) for families the table does not know.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final, Literal, cast, get_args

from torch import nn
from transformers import PreTrainedConfig

__all__ = [
    "NO_ROPE",
    "PROFILES",
    "SHARED_ROPE",
    "ModelProfile",
    "Positions",
    "RopeSlot",
    "Rotate",
    "resolve_profile",
    "rotary_modules",
    "text_config",
]

Positions = Literal["rope", "learned", "none"]
Rotate = Literal["half", "interleaved"]
RopeSlot = Literal["keys", "values"]

SHARED_ROPE: Final = "shared"
"""``layer_rope`` entry: the layer uses the model's single (flat ``rope_parameters``) RoPE."""
NO_ROPE: Final = "nope"
"""``layer_rope`` entry: the layer applies no RoPE, its keys carry no phase (NoPE layers)."""


@dataclass(frozen=True)
class ModelProfile:
    """How positions enter one family's attention.

    :param model_type: the config's ``model_type`` (of the text config for multimodal models).
    :param positions: ``"rope"`` (keys are rotated), ``"learned"`` (absolute position
        embeddings added to the input) or ``"none"`` (keys carry no position: ALiBi, NoPE).
    :param rotary_dims: number of leading head dims RoPE rotates; ``None`` = as many as the
        model's rotary module has frequencies for (all of ``head_dim`` unless partial).
    :param rotate: ``"half"`` pairs dim ``i`` with ``i + rotary_dims/2`` (Llama's
        ``rotate_half``); ``"interleaved"`` pairs ``2i`` with ``2i+1`` (GPT-J, Cohere, GLM).
    :param layer_rope: per layer, the RoPE parameter set it uses: a key of nested
        ``rope_parameters`` (Gemma3 ``"sliding_attention"``), :data:`SHARED_ROPE` or
        :data:`NO_ROPE`; ``None`` = :data:`SHARED_ROPE` for every layer.
    :param nope_layer_types: values of ``config.layer_types`` whose layers apply no RoPE
        (Cohere2 full-attention layers); used when resolving ``layer_rope``.
    :param rope_slot: the cache slot holding the rotated dims: ``"keys"``, or ``"values"``
        where the cache keeps MLA latents (DeepSeek-V2/V3 in transformers 5: the compressed
        latent as keys, the shared RoPE key part as values).
    :param notes: free text (what was guessed, why a family cannot be shifted).
    """

    model_type: str
    positions: Positions
    rotary_dims: int | None = None
    rotate: Rotate = "half"
    layer_rope: tuple[str, ...] | None = None
    nope_layer_types: tuple[str, ...] = ()
    rope_slot: RopeSlot = "keys"
    notes: str = ""

    def __post_init__(self) -> None:
        if self.positions not in get_args(Positions):
            raise ValueError(
                f"ModelProfile.positions must be one of {get_args(Positions)}, got {self.positions!r}"
            )
        if self.rope_slot not in get_args(RopeSlot):
            raise ValueError(f"ModelProfile.rope_slot must be one of {get_args(RopeSlot)}, "
                             f"got {self.rope_slot!r}")
        if self.rotate not in get_args(Rotate):
            raise ValueError(
                f"ModelProfile.rotate must be one of {get_args(Rotate)}, got {self.rotate!r}"
            )
        if self.rotary_dims is not None and (
            isinstance(self.rotary_dims, bool)
            or not isinstance(self.rotary_dims, int)
            or self.rotary_dims <= 0
            or self.rotary_dims % 2
        ):
            raise ValueError(
                f"ModelProfile.rotary_dims must be a positive even int or None, got {self.rotary_dims!r}"
            )
        if self.layer_rope is not None and not (
            isinstance(self.layer_rope, tuple) and all(isinstance(k, str) for k in self.layer_rope)
        ):
            raise ValueError(
                f"ModelProfile.layer_rope must be a tuple of str or None, got {self.layer_rope!r}"
            )
        if self.positions != "rope" and (
            self.rotary_dims is not None or self.layer_rope is not None
        ):
            raise ValueError(
                f"ModelProfile for {self.model_type!r} has positions={self.positions!r}: "
                "rotary_dims and layer_rope only apply to 'rope'"
            )


def _rope(model_type: str, rotate: Rotate = "half", notes: str = "", **kw: Any) -> ModelProfile:
    return ModelProfile(model_type, "rope", rotate=rotate, notes=notes, **kw)


_ROPE_TABLE_NOTE = (
    "rotary table is a sinusoidal buffer without inv_freq; not shiftable by RopeShifter"
)
_ALIBI_NOTE = "ALiBi: positions enter as an attention bias; keys carry none"

PROFILES: Mapping[str, ModelProfile] = MappingProxyType(
    {
        p.model_type: p
        for p in (
            *(
                _rope(t)
                for t in (
                    "llama",
                    "mistral",
                    "mixtral",
                    "ministral",
                    "qwen2",
                    "qwen2_moe",
                    "qwen3",
                    "qwen3_moe",
                    "gemma",
                    "gemma2",
                    "starcoder2",
                    "olmo",
                    "olmo2",
                    "granite",
                )
            ),
            _rope("gemma3_text", notes="per-layer-type theta (sliding local, full global)"),
            _rope("phi3", notes="partial rotary (partial_rotary_factor)"),
            _rope("phi", notes="partial rotary (partial_rotary_factor)"),
            _rope("stablelm", notes="partial rotary (partial_rotary_factor)"),
            _rope("persimmon", notes="partial rotary (partial_rotary_factor)"),
            _rope("gpt_neox", notes="partial rotary (rotary_pct)"),
            _rope("smollm3", notes="NoPE layers from config.no_rope_layers"),
            _rope("cohere", "interleaved"),
            _rope(
                "cohere2",
                "interleaved",
                "full-attention layers apply no RoPE",
                nope_layer_types=("full_attention",),
            ),
            _rope(
                "cohere2_moe",
                "interleaved",
                "full-attention layers apply no RoPE",
                nope_layer_types=("full_attention",),
            ),
            _rope("glm", "interleaved", "partial rotary, interleaved within the rotary dims"),
            _rope("helium", "interleaved"),
            _rope("falcon", notes="RoPE unless config.alibi"),
            _rope("gptj", "interleaved", _ROPE_TABLE_NOTE),
            _rope("codegen", "interleaved", _ROPE_TABLE_NOTE),
            *(
                ModelProfile(t, "learned", notes="learned absolute position embeddings")
                for t in ("gpt2", "gpt_neo", "gpt_bigcode", "opt")
            ),
            ModelProfile("bloom", "none", notes=_ALIBI_NOTE),
            ModelProfile("mpt", "none", notes=_ALIBI_NOTE),
        )
    }
)
"""Known families, keyed by ``model_type``. Entries leave model-dependent fields ``None``."""

# model_type -> config flag that, when truthy, means keys carry no position (ALiBi variant).
_ALIBI_FLAGS: Mapping[str, str] = MappingProxyType({"falcon": "alibi"})


def text_config(model: nn.Module) -> PreTrainedConfig:
    """The decoder's text config of ``model`` (the config itself for text-only models)."""
    config = getattr(model, "config", None)
    if not isinstance(config, PreTrainedConfig):
        raise TypeError(
            f"expected a transformers PreTrainedModel with a config, got {type(model).__name__}"
        )
    return config.get_text_config(decoder=True)


def rotary_modules(model: nn.Module) -> tuple[nn.Module, ...]:
    """Modules of ``model`` holding RoPE inverse frequencies (``inv_freq`` or ``<key>_inv_freq``)."""
    return tuple(
        m
        for m in model.modules()
        if any(
            name == "inv_freq" or name.endswith("_inv_freq")
            for name, _ in m.named_buffers(recurse=False)
        )
    )


def resolve_profile(model: nn.Module, override: ModelProfile | None = None,
                    table: Mapping[str, ModelProfile] | None = None) -> ModelProfile:
    """The profile of ``model``: ``override`` if given, else the entry of ``table`` (default
    :data:`PROFILES`; a handle passes its registry), else a guess.

    For RoPE profiles, fields left ``None`` (``rotary_dims``, ``layer_rope``) are filled in from
    the config: ``head_dim`` times the partial rotary factor, and per layer the RoPE set named
    by ``layer_types`` (nested ``rope_parameters``), ``no_rope_layers`` or ``nope_layer_types``.
    Fields an override states are kept as stated: a plugin that supplies one knows its model.

    :raises TypeError: ``model`` has no transformers config, or ``override`` is not a
        :class:`ModelProfile`.
    :raises ValueError: the family is unknown and the model shows no sign of how positions
        enter attention; pass an override.
    """
    config = text_config(model)
    if override is not None:
        if not isinstance(override, ModelProfile):
            raise TypeError(f"override must be a ModelProfile, got {type(override).__name__}")
        entry = override
    else:
        entry = (PROFILES if table is None else table).get(config.model_type) or _guess(model, config)
        flag = _ALIBI_FLAGS.get(entry.model_type)
        if flag is not None and getattr(config, flag, False):
            return ModelProfile(entry.model_type, "none", notes=_ALIBI_NOTE)
    if entry.positions != "rope":
        return entry
    return replace(
        entry,
        rotary_dims=_rotary_dims(config) if entry.rotary_dims is None else entry.rotary_dims,
        layer_rope=_layer_rope(config, entry) if entry.layer_rope is None else entry.layer_rope,
    )


def _guess(model: nn.Module, config: PreTrainedConfig) -> ModelProfile:
    model_type = config.model_type
    if rotary_modules(model):
        return ModelProfile(
            model_type,
            "rope",
            notes=f"guessed: unknown model_type {model_type!r} has a rotary embedding module; "
            "assumed rotate-half layout. Verify with the conformance suite.",
        )
    if getattr(config, "alibi", False):
        return ModelProfile(model_type, "none", notes=f"guessed: {_ALIBI_NOTE}")
    if _has_position_embedding(model, config):
        return ModelProfile(
            model_type,
            "learned",
            notes=f"guessed: unknown model_type {model_type!r} has a position embedding table",
        )
    raise ValueError(
        f"cannot tell how positions enter attention for model_type {model_type!r} "
        "(no rotary module, no ALiBi flag, no position embedding table); "
        "register a ModelProfile override for it"
    )


def _has_position_embedding(model: nn.Module, config: PreTrainedConfig) -> bool:
    sizes = {getattr(config, k, None) for k in ("max_position_embeddings", "n_positions")} - {None}
    token_embedding = (
        cast(Any, model).get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    )
    return any(
        isinstance(m, nn.Embedding) and m is not token_embedding and m.num_embeddings in sizes
        for m in model.modules()
    )


def _rope_parameter_sets(config: PreTrainedConfig) -> dict[str, Mapping[str, Any]]:
    """RoPE parameter sets keyed like ``layer_rope`` (layer types if nested, else SHARED_ROPE)."""
    params = getattr(config, "rope_parameters", None) or {}
    layer_types = set(getattr(config, "layer_types", None) or ())
    nested = {k: v for k, v in params.items() if k in layer_types and isinstance(v, Mapping)}
    return nested or {SHARED_ROPE: params}


def _rotary_dims(config: PreTrainedConfig) -> int | None:
    """Rotated dims per head from the config; ``None`` if the config does not say."""
    explicit = getattr(config, "rotary_dim", None)  # GPT-J / CodeGen name it directly
    if isinstance(explicit, int) and explicit > 0:
        return explicit
    try:
        head_dim = getattr(config, "head_dim", None)
    except Exception as exc:  # Gemma4: head_dim varies per layer and refuses a global read
        raise ValueError(f"{config.model_type}: head_dim varies per layer ({type(exc).__name__}); "
                         "one ModelProfile cannot describe that") from None
    if not head_dim:
        hidden, heads = (
            getattr(config, "hidden_size", None),
            getattr(config, "num_attention_heads", None),
        )
        if not (hidden and heads):
            return None
        head_dim = hidden // heads
    dims = set()
    for params in _rope_parameter_sets(config).values():
        factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None))
        dim = int(head_dim * (1.0 if factor is None else factor))
        dims.add(2 * ((dim + 1) // 2))  # the model builds ceil(dim / 2) frequencies
    if len(dims) != 1:
        raise ValueError(
            f"{config.model_type}: RoPE parameter sets rotate different numbers of dims {sorted(dims)}; "
            "one ModelProfile cannot describe that"
        )
    return dims.pop()


def _layer_rope(config: PreTrainedConfig, entry: ModelProfile) -> tuple[str, ...] | None:
    num_layers: int = config.num_hidden_layers
    layer_types: Sequence[str] = getattr(config, "layer_types", None) or (SHARED_ROPE,) * num_layers
    sets = _rope_parameter_sets(config)
    uses_rope: Sequence[Any] = (
        getattr(config, "no_rope_layers", None) or (1,) * num_layers
    )  # SmolLM3: 1 = RoPE
    if len(layer_types) < num_layers or len(uses_rope) < num_layers:
        raise ValueError(
            f"{config.model_type}: config lists {len(layer_types)} layer_types and "
            f"{len(uses_rope)} no_rope_layers for {num_layers} layers; cannot tell which layers use RoPE")
    # The modeling code indexes both by layer (Llama 4: no_rope_layers[layer_idx]); a config cut
    # to fewer layers may keep the longer default list, whose extra entries no layer reads.
    layer_types, uses_rope = layer_types[:num_layers], uses_rope[:num_layers]
    params = getattr(config, "rope_parameters", None) or {}
    # Nested rope_parameters may map a layer type to None: no positional encoding there (Beam).
    unrotated = {kind for kind in layer_types if kind in params and params[kind] is None}
    layer_rope = tuple(
        NO_ROPE
        if (not use or kind in entry.nope_layer_types or kind in unrotated)
        else (kind if kind in sets else SHARED_ROPE)
        for kind, use in zip(layer_types, uses_rope, strict=True)
    )
    return None if set(layer_rope) == {SHARED_ROPE} else layer_rope
