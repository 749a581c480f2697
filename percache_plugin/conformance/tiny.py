"""Tiny random models of the built-in families, with an offline byte tokenizer.

The conformance suite's default run covers these nine families (plus SmolLM2 from its GGUF).
Each keeps, at toy size, what makes it interesting for K/V reuse: sliding windows shorter than
a prompt, partial rotary, per-layer-type RoPE theta, q/k norms, softcapping, grouped-query
attention, learned positions. Weights are random (seeded), so shifted reuse is judged against
a lower agreement threshold than on real models (:data:`TINY_MIN_AGREEMENT`).

(The test suite keeps its own copy of these builders in ``tests/``; this one is for users.)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

__all__ = ["TINY_FAMILIES", "TINY_MIN_AGREEMENT", "TINY_VOCAB", "tiny_model", "byte_tokenizer"]

TINY_VOCAB = 320
"""Vocabulary of the tiny models; the byte tokenizer uses ids 0..259."""
TINY_MIN_AGREEMENT = 0.5
"""Shifted-reuse pass threshold on random tiny models: their next-token distributions are
nearly flat, so top-1 flips on small K/V changes that a trained model shrugs off."""

_GQA: Mapping[str, Any] = MappingProxyType({"num_key_value_heads": 2})
_COMMON: Mapping[str, Any] = MappingProxyType({
    "vocab_size": TINY_VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
    "num_attention_heads": 4, "max_position_embeddings": 8192, "tie_word_embeddings": False,
    "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 1,
})
_GPT2_DROPS = frozenset({"hidden_size", "intermediate_size", "num_hidden_layers",
                         "num_attention_heads", "max_position_embeddings"})
_LAYERS4: Mapping[str, Any] = MappingProxyType({
    "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 8, "num_hidden_layers": 4,
})
_FAMILIES: Mapping[str, tuple[str, Mapping[str, Any]]] = MappingProxyType({
    "llama": ("llama", {**_GQA}),
    "qwen2": ("qwen2", {**_GQA}),
    "qwen3": ("qwen3", {**_GQA, "head_dim": 16}),
    "mistral": ("mistral", {**_GQA, "sliding_window": 8}),
    "gemma2": ("gemma2", {**_GQA, **_LAYERS4, "attn_logit_softcapping": 50.0,
                          "final_logit_softcapping": 30.0}),
    "gemma3": ("gemma3_text", {
        **_GQA, **_LAYERS4,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
        },
    }),
    "phi3": ("phi3", {**_GQA, "partial_rotary_factor": 0.5}),
    "gpt_neox": ("gpt_neox", {"rotary_pct": 0.25, "use_parallel_residual": True}),
    "gpt2": ("gpt2", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024,
                      "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}),
})
TINY_FAMILIES: tuple[str, ...] = tuple(_FAMILIES)
"""Llama, Qwen2, Qwen3, Mistral, Gemma2, Gemma3, Phi3, GPT-NeoX, GPT-2."""

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_SPECIALS = ("<s>", "</s>", "<|im_start|>", "<|im_end|>")


def tiny_model(family: str, *, dtype: torch.dtype = torch.float32, seed: int = 0,
               **overrides: Any) -> PreTrainedModel:
    """A tiny random causal LM of ``family`` (one of :data:`TINY_FAMILIES`) in eval mode.

    :raises KeyError: unknown family.
    """
    if family not in _FAMILIES:
        raise KeyError(f"no tiny config for {family!r}; known: {', '.join(TINY_FAMILIES)}")
    model_type, specific = _FAMILIES[family]
    common = {k: v for k, v in _COMMON.items() if not (family == "gpt2" and k in _GPT2_DROPS)}
    kwargs = {**common, **_deep_copy(specific), **overrides}
    config = AutoConfig.for_model(model_type, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def byte_tokenizer(*, chat_template: bool = True) -> PreTrainedTokenizerFast:
    """Offline byte-level tokenizer: ids 0-3 are ``<s> </s> <|im_start|> <|im_end|>``, 4-259
    the bytes; ``<s>`` starts every encoding; a ChatML template unless ``chat_template=False``."""
    vocab = {s: i for i, s in enumerate(_SPECIALS)}
    for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet())):
        vocab[ch] = len(_SPECIALS) + i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        pre_tokenizers.Split("", behavior="isolated"),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="</s>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    if chat_template:
        fast.chat_template = _CHAT_TEMPLATE
    return fast


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
