"""User-facing configuration: one dataclass, every field documented and validated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

__all__ = ["Config", "ConfigError"]

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names it."""


def _help(text: str, default: Any) -> Any:
    if callable(default):
        return field(default_factory=default, metadata={"help": text})
    return field(default=default, metadata={"help": text})


@dataclass
class Config:
    """Settings of a :class:`~percache_plugin.PerCache` handle.

    Pass them as keyword arguments to :func:`percache_plugin.enable`; an unknown key raises
    :class:`ConfigError` naming it. ``Config.describe()`` lists every field with its help text.
    """

    storage_dtype: str | None = _help(
        "dtype of stored K/V: None keeps the model's dtype (bit-exact reuse); 'bfloat16' or "
        "'float16' halve the bytes of an fp32 model at the cost of exactness (reported in stats).",
        None,
    )
    kv_byte_limit: int | None = _help(
        "Byte limit of the K/V store (tensor files); least-frequently-used leaves are evicted "
        "beyond it. None means unlimited.",
        2 * 1024**3,
    )
    reuse: Literal["exact", "shifted"] = _help(
        "'exact' reuses K/V only where the cached chunks form an exact prefix of the prompt; "
        "'shifted' also reuses chunks at new positions (RoPE phase shift, approximate).",
        "exact",
    )
    recompute: str = _help(
        "Which positions of shifted chunks to compute again: 'none', 'all', 'head:k', 'tail:k' "
        "(k tokens per chunk, or a fraction below 1) or 'deviation:r' (the fraction r with the "
        "largest layer-1 K/V deviation). See docs/BENCHMARKS.md for how the default was chosen.",
        "deviation:0.15",
    )
    chat_template: bool | None = _help(
        "Render prompts with the tokenizer's chat template: None uses it when the tokenizer has "
        "one, True requires it, False never uses it.",
        None,
    )
    chunk_separator: str = _help("Text appended to every reusable chunk segment.", "\n\n")
    verify_checksums: bool = _help(
        "Verify a checksum of every K/V file when it is loaded; a mismatch counts as a miss.",
        True,
    )
    debug_log: bool = _help(
        "Log one line per request at INFO level (logger 'percache') saying what was reused.",
        False,
    )

    def __post_init__(self) -> None:
        if self.storage_dtype is not None and self.storage_dtype not in _DTYPES:
            raise ConfigError(
                f"storage_dtype must be None or one of {sorted(_DTYPES)}, got {self.storage_dtype!r}"
            )
        if self.kv_byte_limit is not None and (
            not isinstance(self.kv_byte_limit, int) or self.kv_byte_limit <= 0
        ):
            raise ConfigError(f"kv_byte_limit must be a positive int or None, got {self.kv_byte_limit!r}")
        if self.reuse not in ("exact", "shifted"):
            raise ConfigError(f"reuse must be 'exact' or 'shifted', got {self.reuse!r}")
        from .kv.recompute import parse_strategy

        try:
            parse_strategy(self.recompute)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.chat_template not in (None, True, False):
            raise ConfigError(f"chat_template must be None, True or False, got {self.chat_template!r}")
        if not isinstance(self.chunk_separator, str):
            raise ConfigError("chunk_separator must be a string")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Config:
        """Build a config, naming any unknown key and the valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}; valid keys: {sorted(names)}")
        return cls(**kwargs)

    def replace(self, **kwargs: Any) -> Config:
        """A copy with some fields changed (validated like a new config)."""
        return Config.from_kwargs(**{**dataclasses.asdict(self), **kwargs})

    @property
    def torch_storage_dtype(self) -> torch.dtype | None:
        return None if self.storage_dtype is None else _DTYPES[self.storage_dtype]

    @classmethod
    def describe(cls) -> str:
        """One line per field: name, default and help text."""
        lines = []
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            lines.append(f"{f.name} = {default!r}\n    {f.metadata.get('help', '')}")
        return "\n".join(lines)
