"""OpenAI's predicted outputs on /v1/chat/completions: greedy decoding drafts from the
``prediction`` and verifies every draft, so the answer equals plain generate's with or without
one; usage counts the prediction tokens accepted and rejected."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LogitsProcessorList

from percache_plugin.server.penalties import LogitBias
from tests.server.conftest import MODEL, client, events, post_json

N = 24
# +100 on the printable ASCII bytes (ids 4-97 of the byte tokenizer): the random model's answer
# is then text that tokenizes back to the same ids, as a real model's answer does
ASCII = {str(i): 100 for i in range(4, 98)}
MESSAGES = [{"role": "system", "content": "Rewrite the note with one change."},
            {"role": "user", "content": "Note: rehearsal on Friday 6pm. Change: Friday to Saturday."}]
BODY = {"model": MODEL, "messages": MESSAGES, "temperature": 0, "max_tokens": N, "logit_bias": ASCII}


def _plain(pc: Any) -> str:
    text = pc.tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = pc.tokenizer(text, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    bias = LogitBias([(int(i), float(b)) for i, b in ASCII.items()])
    with pc.disabled(), torch.inference_mode():
        out = pc.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=N, do_sample=False,
                                pad_token_id=0, logits_processor=LogitsProcessorList([bias]))
    return str(pc.tokenizer.decode(out[0, len(ids):].tolist(), skip_special_tokens=True))


def _chat(server: Any, **extra: Any) -> tuple[str, dict[str, int]]:
    status, body = post_json(server, "/v1/chat/completions", {**BODY, **extra})
    assert status == 200, body
    return body["choices"][0]["message"]["content"], body["usage"]["completion_tokens_details"]


def _middle_changed(text: str) -> str:
    third = len(text) // 3
    return text[:third] + "".join("x" if c != "x" else "y" for c in text[third:2 * third]) + text[2 * third:]


def test_a_prediction_leaves_the_answer_as_plain_generate_and_counts_its_tokens(pc: Any, server: Any) -> None:
    plain = _plain(pc)
    assert len(plain) == N and pc.tokenizer(plain, add_special_tokens=False)["input_ids"]
    text, details = _chat(server)
    assert text == plain
    assert details == {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    text, details = _chat(server, prediction={"type": "content", "content": plain})
    assert text == plain and details["accepted_prediction_tokens"] > N // 2
    changed = _middle_changed(plain)
    parts = [{"type": "text", "text": changed[:5]}, {"type": "text", "text": changed[5:]}]
    text, details = _chat(server, prediction={"type": "content", "content": parts})
    assert text == plain  # a prediction used unverified would have given its middle instead
    assert details["accepted_prediction_tokens"] > 0 and details["rejected_prediction_tokens"] > 0
    text, _ = _chat(server, prediction={"type": "content", "content": "Something else entirely."})
    assert text == plain
    _, details = _chat(server, temperature=1.0, seed=1, prediction={"type": "content", "content": plain})
    assert details == {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}  # sampling


def test_the_stream_usage_chunk_and_the_openai_client_carry_the_counts(pc: Any, server: Any) -> None:
    plain = _plain(pc)
    got = events(server, "/v1/chat/completions", {**BODY, "stream": True, "stream_options": {"include_usage": True},
                                                  "prediction": {"type": "content", "content": plain}})
    assert got[-1] == "[DONE]"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in got[:-1] if e["choices"]) == plain
    assert got[-2]["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] > N // 2
    r = client(server).chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=N,
                                               logit_bias=ASCII, prediction={"type": "content", "content": plain})
    assert r.choices[0].message.content == plain
    assert r.usage.completion_tokens_details.accepted_prediction_tokens > N // 2
    assert r.usage.completion_tokens_details.rejected_prediction_tokens == 0


def test_a_bad_prediction_is_a_400_naming_it(server: Any) -> None:
    for value in ("text", {"type": "text", "content": "x"}, {"type": "content", "content": [1]}):
        status, body = post_json(server, "/v1/chat/completions", {**BODY, "prediction": value})
        assert status == 400 and body["error"]["param"] == "prediction", body
