"""The server on the real SmolLM2-135M-Instruct (real BPE tokenizer and chat template): over three
turns the answers equal plain generate over the template's ids and ``pc.chat``, whose ids are
the same, and cached tokens grow from the second turn."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import percache_plugin as percache
from tests.server.conftest import client

pytestmark = pytest.mark.slow

SYSTEM = "You are a helpful assistant. Answer briefly."


def test_three_turns_equal_plain_generate_and_pc_chat(smollm2: tuple[Any, Any]) -> None:
    from percache_plugin.server.serve import ServerThread
    from percache_plugin.server.state import ServerSettings

    model, tok = smollm2
    pc = percache.enable(model, tok)
    pc.sessions.create("s", system=SYSTEM)
    messages = [{"role": "system", "content": SYSTEM}]
    with ServerThread(pc, ServerSettings(model_name="smollm2")) as srv:
        for turn, question in enumerate(["What is the capital of France?", "And of Italy?", "Which one is bigger?"]):
            messages.append({"role": "user", "content": question})
            r = client(srv).chat.completions.create(model="smollm2", messages=messages, temperature=0,
                                                    max_tokens=8)
            answer = r.choices[0].message.content
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids = list(tok(text, add_special_tokens=False)["input_ids"])
            with pc.disabled():
                x = torch.tensor([ids])
                out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=8, do_sample=False)
            assert answer == tok.decode(out[0, len(ids):], skip_special_tokens=True), f"turn {turn + 1}"
            reply = pc.chat(question, session="s", max_new_tokens=8, do_sample=False)
            assert reply.prompt_ids == ids and reply.text == answer, f"turn {turn + 1}"
            assert r.usage.prompt_tokens == len(ids)
            assert (r.usage.prompt_tokens_details.cached_tokens > 0) == (turn > 0)
            messages.append({"role": "assistant", "content": answer})
    pc.close()


def test_penalised_answers_equal_plain_generate_with_drafts_accepted(smollm2: tuple[Any, Any]) -> None:
    """OpenAI's penalties on a copying task, where drafted decoding accepts most drafts: the
    server's answer and ``pc.complete``'s tokens equal plain generate with the same processor."""
    from percache_plugin.server.penalties import OpenAIPenalties
    from percache_plugin.server.serve import ServerThread
    from percache_plugin.server.state import ServerSettings

    model, tok = smollm2
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    notes = ("Meeting notes. Ana: the choir rehearsal moved to Friday at 6 pm in the small hall. Carl will "
             "bring the projector on Friday. Ben owns the budget slides for Monday's review. ")
    messages = [{"role": "user", "content": notes * 3 + "Repeat the notes above word for word."}]
    ids = list(tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                   add_special_tokens=False)["input_ids"])

    def plain(processors: list[Any]) -> list[int]:
        with pc.disabled(), torch.inference_mode():
            x = torch.tensor([ids])
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=48, do_sample=False,
                                 logits_processor=processors)
        return list(out[0, len(ids):].tolist())

    want = plain([OpenAIPenalties(0.3, 1.5)])
    assert want != plain([])  # the penalties change this answer
    gen = pc.complete(ids, max_new_tokens=48, do_sample=False, logits_processor=[OpenAIPenalties(0.3, 1.5)])
    assert gen.token_ids == want and gen.stats.tokens_accepted >= 20
    with ServerThread(pc, ServerSettings(model_name="smollm2")) as srv:
        r = client(srv).chat.completions.create(model="smollm2", messages=messages, temperature=0, max_tokens=48,
                                                presence_penalty=0.3, frequency_penalty=1.5)
    assert r.choices[0].message.content == tok.decode(want, skip_special_tokens=True)
    pc.close()
