"""``seed`` seeds its own request only: the same seed gives the same sample whatever ran before
it, and the process's random state is as it was after a seeded request (it used to call
``torch.manual_seed``: every later unseeded request sampled from the seeded state)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.server.conftest import MODEL, client, post_json

pytest.importorskip("openai")

SAMPLED = {"model": MODEL, "messages": [{"role": "user", "content": "Say something."}],
           "max_tokens": 16, "temperature": 1.0}


def _chat(server: Any, **extra: Any) -> str:
    return str(client(server).chat.completions.create(**SAMPLED, **extra).choices[0].message.content)


def test_same_seed_same_text_with_an_unseeded_request_between(server: Any) -> None:
    first = _chat(server, seed=7)
    _chat(server)
    assert _chat(server, seed=7) == first
    assert _chat(server, seed=8) != first  # the seed is used: another one samples otherwise


def test_a_seeded_request_leaves_the_global_random_state_alone(server: Any) -> None:
    torch.manual_seed(0)
    before = torch.get_rng_state()
    _chat(server, seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    status, _ = post_json(server, "/v1/completions", {"model": MODEL, "prompt": "Once", "max_tokens": 8,
                                                      "temperature": 1.0, "seed": 3})
    assert status == 200 and torch.equal(torch.get_rng_state(), before)


def test_an_unseeded_request_samples_as_if_no_seeded_one_ran(server: Any) -> None:
    torch.manual_seed(0)
    alone = _chat(server)
    torch.manual_seed(0)
    _chat(server, seed=7)
    assert _chat(server) == alone


def test_ask_with_a_seed_leaves_the_global_random_state_alone(server: Any) -> None:
    post_json(server, "/v1/documents", {"documents": ["Ana: the rehearsal moved to Friday at 6 pm."]})
    ask = {"question": "When is the rehearsal?", "temperature": 1.0, "max_tokens": 8, "seed": 5}
    torch.manual_seed(0)
    before = torch.get_rng_state()
    status, first = post_json(server, "/v1/ask", ask)
    assert status == 200 and first["source"] == "generated"
    assert torch.equal(torch.get_rng_state(), before)
    assert post_json(server, "/v1/ask", ask)[1]["answer"] == first["answer"]


def test_a_greedy_ask_with_a_seed_still_uses_the_qa_bank(server: Any) -> None:
    post_json(server, "/v1/documents", {"documents": ["Ana: the rehearsal moved to Friday at 6 pm."]})
    ask = {"question": "When is the rehearsal?", "max_tokens": 8, "seed": 5}  # greedy: the seed reads nothing
    assert post_json(server, "/v1/ask", ask)[1]["source"] == "generated"
    assert post_json(server, "/v1/ask", ask)[1]["source"] == "qa_bank"
