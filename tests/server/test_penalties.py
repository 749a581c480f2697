"""Penalties and the extension sampling fields are honoured exactly (OpenAI's formula checked by
hand; the server's tokens, drafted decoding included, are plain ``generate``'s with it), and a request carrying a penalty is
never served a stored greedy answer from the QA bank, nor stores its answer there."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from percache_plugin.server.penalties import LogitBias, OpenAIPenalties
from tests.helpers import baseline
from tests.server.conftest import MODEL, post_json
from tests.server.test_routes_rag import DOCS

PROMPT = "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat"


def _reference(model: Any, ids: list[int], n: int, presence: float, frequency: float) -> list[int]:
    """Plain ``model.generate`` (no percache) with the penalties: the tokens an exact server
    gives (the formula itself is checked by hand below)."""
    x = torch.tensor([ids])
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                             pad_token_id=0, logits_processor=[OpenAIPenalties(presence, frequency)])
    return list(out[0, len(ids):].tolist())


def test_the_processor_is_openais_formula() -> None:
    """logits[j] -= c[j] * frequency + (c[j] > 0) * presence, c counting generated tokens only."""
    scores = torch.zeros((1, 6))
    ids = torch.tensor([[5, 5, 1, 2, 2, 2, 4]])  # prompt [5, 5]: not counted
    out = OpenAIPenalties(0.5, 1.5, prompt_tokens=2)(ids, scores)  # type: ignore[arg-type]
    assert out.tolist() == [[0.0, -2.0, -5.0, 0.0, -2.0, 0.0]]
    learnt = OpenAIPenalties(0.5, 1.5)
    assert learnt(ids[:, :2], scores).tolist() == scores.tolist()  # type: ignore[arg-type]
    assert learnt(ids, scores).tolist() == out.tolist()  # type: ignore[arg-type]


@pytest.mark.parametrize(("presence", "frequency"), [(0.0, 1.5), (0.5, 0.0), (-1.0, 0.3)])
def test_penalties_stay_exact_under_drafted_decoding(pc: Any, presence: float, frequency: float) -> None:
    ids = pc.tokenizer(PROMPT)["input_ids"]
    want = _reference(pc.model, ids, 16, presence, frequency)
    assert want != baseline(pc.model, ids, 16)[0]  # the penalty changes this answer
    gen = pc.complete(PROMPT, max_new_tokens=16, do_sample=False,
                      logits_processor=[OpenAIPenalties(presence, frequency)])
    assert gen.token_ids == want
    assert gen.stats.drafting == "on" and gen.stats.tokens_drafted > 0  # drafts were verified


def test_chat_and_completions_apply_the_penalties(pc: Any, server: Any) -> None:
    ids = pc.tokenizer(PROMPT)["input_ids"]
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    penalised = post_json(server, "/v1/completions", {**body, "frequency_penalty": 1.5})[1]
    want = _reference(pc.model, ids, 16, 0.0, 1.5)
    assert penalised["choices"][0]["text"] == pc.tokenizer.decode(want, skip_special_tokens=True)
    plain = post_json(server, "/v1/completions", body)[1]["choices"][0]["text"]
    assert plain != penalised["choices"][0]["text"]
    zero = post_json(server, "/v1/completions", {**body, "presence_penalty": 0, "frequency_penalty": 0.0})
    assert zero[0] == 200 and zero[1]["choices"][0]["text"] == plain  # defaults are accepted
    messages = [{"role": "user", "content": PROMPT}]
    chat = post_json(server, "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 12,
                                                      "temperature": 0, "presence_penalty": 1.0})[1]
    chat_ids = pc.tokenizer(pc.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                            add_special_tokens=False)["input_ids"]
    want = _reference(pc.model, chat_ids, 12, 1.0, 0.0)
    assert chat["choices"][0]["message"]["content"] == pc.tokenizer.decode(want, skip_special_tokens=True)


def test_repetition_penalty_is_transformers_own(pc: Any, server: Any) -> None:
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 16, "temperature": 0, "repetition_penalty": 1.3}
    got = post_json(server, "/v1/completions", body)[1]["choices"][0]["text"]
    x = torch.tensor([pc.tokenizer(PROMPT)["input_ids"]])
    with torch.inference_mode():
        out = pc.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=16, do_sample=False,
                                repetition_penalty=1.3, pad_token_id=0)
    want = pc.tokenizer.decode(out[0, x.shape[1]:].tolist(), skip_special_tokens=True)
    assert got == want and got != post_json(server, "/v1/completions", {**body, "repetition_penalty": 1})[1][
        "choices"][0]["text"]


def test_logit_bias_is_added_to_the_logits(pc: Any, server: Any) -> None:
    ids = pc.tokenizer(PROMPT)["input_ids"]
    scores = torch.zeros((1, 8))
    assert LogitBias([(2, 1.5), (5, -100.0)])(torch.tensor([ids]), scores).tolist() == [  # type: ignore[arg-type]
        [0, 0, 1.5, 0, 0, -100, 0, 0]]
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    plain = post_json(server, "/v1/completions", body)[1]["choices"][0]["text"]
    favourite = ord("q")  # the byte tokenizer: one token per byte
    forced = post_json(server, "/v1/completions", {**body, "logit_bias": {str(favourite): 100}})[1]
    assert forced["choices"][0]["text"] == pc.tokenizer.decode([favourite] * 8) != plain
    bias = {str(baseline(pc.model, ids, 1)[0][0]): -10.0, "3": 2.5}  # not the plain first token
    got = post_json(server, "/v1/completions", {**body, "logit_bias": bias})[1]["choices"][0]["text"]
    x = torch.tensor([ids])
    with torch.inference_mode():
        out = pc.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=8, do_sample=False, pad_token_id=0,
                                logits_processor=[LogitBias([(int(k), v) for k, v in bias.items()])])
    assert got == pc.tokenizer.decode(out[0, len(ids):].tolist(), skip_special_tokens=True) != plain


@pytest.mark.parametrize("narrow", [{"top_k": 1}, {"min_p": 1.0}, {"top_p": 0}])
def test_top_k_min_p_and_top_p_narrow_sampling(server: Any, narrow: dict[str, Any]) -> None:
    """Keeping only the top token, sampling gives the greedy answer (top_k and min_p were
    ignored: the seeded sample was another answer; top_p 0 always kept the top token)."""
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 16}
    greedy = post_json(server, "/v1/completions", {**body, "temperature": 0})[1]["choices"][0]["text"]
    sampled = {**body, "temperature": 1.0, "seed": 3}
    assert post_json(server, "/v1/completions", sampled)[1]["choices"][0]["text"] != greedy
    assert post_json(server, "/v1/completions", {**sampled, **narrow})[1]["choices"][0]["text"] == greedy


def test_a_penalised_ask_is_not_served_nor_stored_by_the_qa_bank(pc: Any, server: Any) -> None:
    post_json(server, "/v1/documents", {"documents": DOCS})
    ask = {"question": "When is the choir rehearsal?", "max_tokens": 8}
    first = post_json(server, "/v1/ask", ask)[1]
    assert first["source"] == "generated" and len(pc.qa_bank.entries()) == 1
    for penalty in ({"frequency_penalty": 1.5}, {"presence_penalty": 1.0}, {"repetition_penalty": 1.3},
                    {"logit_bias": {"101": 5}}):
        status, got = post_json(server, "/v1/ask", {**ask, **penalty})
        assert status == 200 and got["source"] == "generated", penalty  # not the stored greedy answer
        assert len(pc.qa_bank.entries()) == 1  # nor stored as one
    zero = post_json(server, "/v1/ask", {**ask, "presence_penalty": 0, "frequency_penalty": 0,
                                         "logit_bias": {"101": 0}})[1]
    assert zero["source"] == "qa_bank" and zero["answer"] == first["answer"]
    status, got = post_json(server, "/v1/ask", {**ask, "scope": "bob"})
    assert status == 400 and got["error"]["param"] == "scope"  # a field /v1/ask does not know
