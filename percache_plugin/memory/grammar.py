"""Constrained extraction: a logits processor that keeps the output a valid fact-line prefix.

The program writes the structure and the model fills only the field values. The output is
zero or more lines ``{"<f1>": "<value>", "<f2>": "<value>", ...}`` followed by end of text,
with the fields in the order given. The processor masks every token that would leave that
grammar:

- the JSON structure between values (``{"summary": "``, ``", "datetime": "``, ``"}`` and the
  newline) is forced, one pre-tokenized token at a time;
- the first value may start with a ``lead`` the program writes (the speaker's name);
- inside a value only tokens without ``"``, ``\\``, a newline or another control character are
  allowed, plus the lone ``"`` token that closes the value; a value that reaches its token cap,
  or whose last token ends a sentence (``.``, ``!``, ``?``), is closed;
- at the start of a line the model chooses between opening another fact and ending (end of
  text); after ``max_facts`` lines it must end.

Validation stays strict downstream (:func:`.extract.parse_facts`): a line cut by the token
budget, or a summary too short, is still dropped and counted as malformed.

A :class:`FactGrammar` holds the per-tokenizer tables (built once, a pass over the
vocabulary); :meth:`FactGrammar.processor` gives a processor for ONE ``generate`` call: it takes
the length of the first ``input_ids`` it sees as the prompt length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["FactGrammar", "FactLineProcessor", "GrammarError"]


class GrammarError(ValueError):
    """The tokenizer cannot express the grammar (e.g. ``"`` is not a single token)."""


@dataclass(frozen=True)
class _Literal:
    ids: tuple[int, ...]


class FactGrammar:
    """The fact-line grammar for one tokenizer.

    :param tokenizer: a Hugging Face tokenizer (byte-level or SentencePiece).
    :param fields: ``(name, token cap)`` pairs, in output order.
    :param eos_ids: the token ids that end generation (the tokenizer's ``eos_token_id`` when
        omitted).
    :param exclude: characters no value may hold (e.g. ``":"``, so that a summary is a sentence
        and not a copy of a ``Speaker: text`` line).
    """

    def __init__(self, tokenizer: Any, fields: Sequence[tuple[str, int]],
                 eos_ids: Sequence[int] | None = None, exclude: str = "") -> None:
        if not fields:
            raise GrammarError("the fact grammar needs at least one field")
        if any(cap < 1 for _, cap in fields):
            raise GrammarError(f"every field's token cap must be >= 1, got {list(fields)}")
        self.fields = tuple(fields)
        quote = tokenizer.encode('"', add_special_tokens=False)
        if len(quote) != 1:
            raise GrammarError(f"the tokenizer splits '\"' into {len(quote)} tokens; the grammar "
                               "needs it as one token")
        self.quote = int(quote[0])
        eos = list(eos_ids) if eos_ids is not None else [tokenizer.eos_token_id]
        self.eos = tuple(int(e) for e in eos if e is not None)
        if not self.eos:
            raise GrammarError("the tokenizer has no end-of-text token (pass eos_ids)")

        def lit(text: str) -> tuple[int, ...]:
            return tuple(int(i) for i in tokenizer.encode(text, add_special_tokens=False))

        names = [name for name, _ in self.fields]
        self.open = lit('{"' + names[0] + '": "')
        # After a value's closing quote: the next key, or the end of the object and the line.
        self.between = [lit(', "' + n + '": "') for n in names[1:]] + [lit("}\n")]
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        size = max(len(tokenizer), max(special | set(self.eos) | {self.quote}) + 1)
        content = torch.zeros(size, dtype=torch.bool)
        for i in range(size):
            if i in special:
                continue
            s = tokenizer.decode([i])
            if s and not any(ch in '"\\\x7f' or ch in exclude or ord(ch) < 0x20 for ch in s):
                content[i] = True
        self.content = content
        self.ends = torch.zeros(size, dtype=torch.bool)
        for i in torch.nonzero(content).flatten().tolist():
            if tokenizer.decode([i]).rstrip().endswith((".", "!", "?")):
                self.ends[i] = True
        self._encode = lit

    def processor(self, max_facts: int, lead: str = "") -> FactLineProcessor:
        """A processor for one ``generate`` call writing at most ``max_facts`` lines, each
        first value starting with ``lead`` (written by the program, e.g. the speaker's name)."""
        if '"' in lead or "\\" in lead or any(ord(ch) < 0x20 for ch in lead):
            raise GrammarError(f"a lead cannot hold quotes, backslashes or control characters: {lead!r}")
        return FactLineProcessor(self, max_facts, self._encode(lead) if lead else ())

    def allowed(self, generated: Sequence[int], max_facts: int,
                lead: Sequence[int] = ()) -> torch.Tensor | tuple[int, ...]:
        """What may follow ``generated`` (the new tokens so far): the content mask plus the
        quote (inside a value, under its cap, not after a sentence end) or a tuple of token ids."""
        facts = 0
        i, n = 0, len(generated)
        while True:  # one iteration per line
            if i == n:
                return ((self.open[0],) if facts < max_facts else ()) + self.eos
            if generated[i] in self.eos:
                return self.eos  # generation ended; nothing else is valid
            for tok in (*self.open, *lead):
                if i == n:
                    return (tok,)
                if generated[i] != tok:
                    return self.eos  # off the grammar (cannot happen under the processor)
                i += 1
            for f, (_, cap) in enumerate(self.fields):
                used = len(lead) if f == 0 else 0
                while i < n and generated[i] != self.quote:
                    used += 1
                    i += 1
                if i == n:
                    done = used >= cap or (i > 0 and bool(self.ends[generated[i - 1]]))
                    return (self.quote,) if done else self.content
                i += 1  # the closing quote
                for tok in self.between[f]:
                    if i == n:
                        return (tok,)
                    if generated[i] != tok:
                        return self.eos
                    i += 1
            facts += 1


class FactLineProcessor:
    """A transformers logits processor (see the module docstring); one per ``generate`` call."""

    def __init__(self, grammar: FactGrammar, max_facts: int, lead: Sequence[int] = ()) -> None:
        if max_facts < 0:
            raise GrammarError(f"max_facts must be >= 0, got {max_facts}")
        self.grammar = grammar
        self.max_facts = max_facts
        self.lead = tuple(lead)
        self.prompt_len: int | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != 1:
            raise GrammarError("the fact grammar decodes one sequence at a time")
        if self.prompt_len is None:
            self.prompt_len = int(input_ids.shape[1])
        generated = input_ids[0, self.prompt_len:].tolist()
        allowed = self.grammar.allowed(generated, self.max_facts, self.lead)
        vocab = scores.shape[-1]
        mask = torch.zeros(vocab, dtype=torch.bool, device=scores.device)
        if isinstance(allowed, torch.Tensor):
            m = min(vocab, allowed.shape[0])
            mask[:m] = allowed[:m].to(scores.device)
            mask[self.grammar.quote] = True
        else:
            mask[list(allowed)] = True
        return scores.masked_fill(~mask, float("-inf"))  # type: ignore[return-value]
