"""A tiny byte-level tokenizer for tests: offline, deterministic, with a chat template."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

__all__ = ["byte_tokenizer", "CHAT_TEMPLATE"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_SPECIALS = ("<s>", "</s>", "<|im_start|>", "<|im_end|>")


def byte_tokenizer(*, chat_template: bool = False, bos: bool = True) -> PreTrainedTokenizerFast:
    """Ids 0-3 are specials, 4-259 the bytes; fits any tiny model with vocab >= 260."""
    vocab = {s: i for i, s in enumerate(_SPECIALS)}
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    for i, ch in enumerate(sorted(alphabet)):
        vocab[ch] = len(_SPECIALS) + i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
         pre_tokenizers.Split("", behavior="isolated")]
    )
    tok.decoder = decoders.ByteLevel()
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
            additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        )
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    return fast
