"""A chat turn's first forward computes only its new tokens: drafts wait for the second one, so
the time to the first token is that of the turn alone (draft tokens cost ~20% of a short turn)."""

from __future__ import annotations

from typing import Any

import percache_plugin as percache
from tests.helpers import baseline, tiny_pair


def test_the_first_forward_of_a_turn_holds_no_draft_tokens() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    fed: list[int] = []
    drafted = 0

    def record(module: Any, args: Any, kwargs: Any) -> None:
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        fed.append(int(ids.shape[1]))

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        for _ in range(3):  # the same message again: the earlier reply is a draft source
            fed.clear()
            reply = pc.chat("Say the same thing again.", max_new_tokens=6, do_sample=False)
            assert reply.stats.drafting == "on"
            assert fed[0] == reply.stats.tokens_computed
            drafted += reply.stats.tokens_drafted
    finally:
        handle.remove()
    assert drafted > 0  # drafts were verified, in later forwards
    with pc.disabled():
        assert reply.token_ids == baseline(model, reply.prompt_ids, 6)[0]
