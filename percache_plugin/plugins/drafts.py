"""The built-in draft sources: the prompt and whatever the caller offered (QA-bank answers,
earlier assistant turns)."""

from __future__ import annotations

from collections.abc import Sequence

from ..decode.sources import DraftHints, DraftSource, prompt_source, text_source
from ..hooks.contexts import EngineContext
from ..hooks.specs import hookimpl
from ..segments import Prompt

__all__ = ["BuiltinDraftSources"]


class BuiltinDraftSources:
    """The prompt's token ids; each ``hints.texts`` entry tokenized, each ``hints.token_ids``
    entry as given (both anchored: they are whole earlier answers)."""

    @hookimpl(trylast=True)
    def percache_draft_sources(self, ctx: EngineContext, prompt: Prompt,
                               hints: DraftHints) -> Sequence[DraftSource]:
        found = [prompt_source(prompt.input_ids)]
        for name, texts in hints.texts.items():
            found.append(text_source(name, texts, ctx.tokenizer))
        for name, seqs in hints.token_ids.items():
            found.append(DraftSource(name, tuple(tuple(int(t) for t in s) for s in seqs if s), True))
        return found
