"""pc.chat on the real SmolLM2-135M-Instruct: exact against generate over the whole conversation."""

from __future__ import annotations

from typing import Any

import pytest

import percache_plugin as percache
from tests.helpers import baseline

pytestmark = pytest.mark.slow

MESSAGES = ["Hi!", "What is the capital of France?", "And of Italy?", "Thanks.", "Name a color.",
            "Another one?", "What day comes after Monday?", "Count to three.", "Say hello.", "Bye."]


def test_twenty_turns_on_smollm2_equal_generate_over_the_conversation(smollm2: tuple[Any, Any]) -> None:
    model, tok = smollm2
    pc = percache.enable(model, tok)
    pc.sessions.create("s", system="You are a helpful assistant. Answer in a few words.")
    messages = []
    for i in range(20):
        reply = pc.chat(MESSAGES[i % len(MESSAGES)], session="s", max_new_tokens=4, do_sample=False)
        with pc.disabled():
            want, logits = baseline(model, reply.prompt_ids, 4)
        assert reply.token_ids == want, f"turn {i + 1}"
        assert (reply.first_logits - logits).abs().max().item() <= 1e-4
        if i:
            assert reply.stats.tokens_computed <= len(pc.sessions.get("s").turns[-1].user_ids) + 1
        messages.append(reply)
    # The ids are the template's own rendering of the conversation.
    session = pc.sessions.get("s")
    chat = [{"role": "system", "content": session.system}]
    for t in session.turns[:-1]:
        chat += [{"role": "user", "content": t.message}, {"role": "assistant", "content": tok.decode(t.reply_ids)}]
    chat.append({"role": "user", "content": session.turns[-1].message})
    rendered = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert tok.decode(messages[-1].prompt_ids) == rendered
    pc.close()
