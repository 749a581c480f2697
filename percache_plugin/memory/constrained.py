"""Constrained extraction of one turn: the ``memory_turn_facts`` template and the fact grammar.

One model call per turn. The program writes the JSON structure and starts the summary with the
speaker's name (the part of the turn before ``": "``, as chat turns and LoCoMo turns are
written: ``"Ana: I moved to Porto"``; at most three words); the model writes the rest of one
sentence without ``":"`` (so it cannot copy the ``Speaker: text`` line), or ends at once when
the turn states no fact. Each fact comes from exactly the turn it was extracted from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..segments import Segment
from .extract import ParsedFacts, parse_facts
from .grammar import FactGrammar

if TYPE_CHECKING:
    from ..stats import Generation

__all__ = ["TURN_FIELDS", "TurnGrammar", "extract_turn", "speaker"]

TURN_FIELDS = (("summary", 40),)
SYSTEM = "You extract facts from conversations."
_SPEAKER = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?([^:\[\]\"\\\n]{1,40}?):\s")


def speaker(text: str) -> str:
    """The speaker's name at the start of a turn (``"[date] Ana: ..."`` gives ``"Ana"``), or
    "" when the turn has none of at most three words."""
    m = _SPEAKER.match(text)
    name = " ".join(m.group(1).split()) if m else ""
    return name if 0 < len(name.split()) <= 3 else ""


class TurnGrammar:
    """The fact grammar of :data:`TURN_FIELDS`, built once for the tokenizer in use (building
    it reads the whole vocabulary)."""

    def __init__(self) -> None:
        self._tokenizer: Any = None
        self._grammar: FactGrammar | None = None

    def __call__(self, tokenizer: Any) -> FactGrammar:
        if self._grammar is None or self._tokenizer is not tokenizer:
            self._grammar = FactGrammar(tokenizer, TURN_FIELDS, exclude=":")
            self._tokenizer = tokenizer
        return self._grammar


def extract_turn(generate: Callable[..., Generation], grammar: FactGrammar, template: str, text: str,
                 *, max_facts: int, max_new_tokens: int) -> tuple[ParsedFacts, Generation]:
    """The facts of one turn (validated by :func:`.extract.parse_facts`) and the generation
    (``generate`` is the idle context's: ``Engine.generate``, preempted by foreground work)."""
    name = speaker(text)
    prompt = template.replace("{turn}", text.strip()).replace("{name}", name or "the speaker")
    gen = generate([Segment(SYSTEM, "system"), Segment(prompt, "query")],
                     max_new_tokens=max_new_tokens, do_sample=False,
                     logits_processor=[grammar.processor(max_facts, name)])
    return parse_facts(gen.text), gen
