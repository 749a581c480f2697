"""A family missing from the profile table gets the RoPE layout the model confirms: the
interleaved layout of GLM-4 is found (it was guessed rotate-half, and shifted keys came out
wrong); a family whose keys no layout reproduces is not shifted, with the measured errors."""

from __future__ import annotations

from percache_plugin import enable
from percache_plugin.attention.profile import PROFILES
from percache_plugin.attention.rope_verify import layout_error
from percache_plugin.conformance.families import build_family
from percache_plugin.conformance.tiny import byte_tokenizer


def test_unknown_interleaved_family_gets_the_layout_its_keys_confirm() -> None:
    model = build_family("glm4")
    assert "glm4" not in PROFILES
    pc = enable(model, byte_tokenizer(), reuse="shifted")
    try:
        assert pc.shifter is not None
        assert pc.shifter.rotate == "interleaved"
        assert layout_error(model, pc.shifter) <= 1e-4
    finally:
        pc.close()


def test_family_no_layout_describes_is_not_shifted() -> None:
    model = build_family("nanochat")
    pc = enable(model, byte_tokenizer(), reuse="shifted")
    try:
        assert pc.shifter is None
        assert not pc.capabilities.shifted_reuse
        assert "no RoPE layout reproduces its keys" in pc.capabilities.reasons["shifted_reuse"]
    finally:
        pc.close()
