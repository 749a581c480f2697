"""The serve load driver on a tiny model: concurrent streaming clients, none lost, every
response complete, and the plain arm's answers equal percache's for the same conversations."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("uvicorn")

from percache_plugin.bench.serve import _arm, _compare  # noqa: E402
from percache_plugin.bench.serve_load import Script, percentile  # noqa: E402
from tests.helpers import tiny_pair  # noqa: E402


def test_both_arms_serve_every_request_with_the_same_answers() -> None:
    model, tok = tiny_pair("llama")
    script = Script("You answer from the notes: the rehearsal is on Friday at 6 pm in the small hall.",
                    ("When?", "Where?", "Who?"), turns=2, max_tokens=4, model="tiny")
    args = SimpleNamespace(clients=3, duration=1.0, max_tokens=4)
    arms: dict[str, Any] = {name: _arm(name, model, tok, args, script) for name in ("plain", "percache")}
    for s in arms.values():
        assert s["requests"] >= 3 and s["complete"] == s["requests"] == s["served_by_server"], s
        assert s["latency_p50_s"] > 0 and s["ttft_p50_s"] <= s["latency_p95_s"]
    assert arms["plain"]["cached_tokens"] == 0 and arms["percache"]["cached_tokens"] > 0
    compare = _compare(arms)
    assert compare["common_requests"] >= 3
    assert compare["identical_answers"] == compare["common_requests"]


def test_percentile_is_the_nearest_rank() -> None:
    xs = [float(i) for i in range(1, 21)]
    assert percentile(xs, 50) == 10.0 and percentile(xs, 95) == 19.0 and percentile(xs, 100) == 20.0
    assert percentile([3.0], 95) == 3.0


def test_the_plain_arm_takes_every_argument_the_servers_jobs_pass() -> None:
    """The server's jobs call ``engine.generate`` with ``exact_only`` (and ``prediction`` /
    ``seed`` from the request); the plain arm passed them to ``model.generate``, which refused
    them, so every plain request failed."""
    from percache_plugin.bench.serve_plain import PlainModel
    from percache_plugin.kv.blocks import block_prompt

    model, tok = tiny_pair("llama")
    plain = PlainModel(model, tok)
    prompt = block_prompt(tok("Hello there, how are you?")["input_ids"], 8, "plain")
    base = plain.generate(prompt, max_new_tokens=4, do_sample=False)
    again = plain.generate(prompt, max_new_tokens=4, do_sample=False, exact_only=True, prediction="Fine.", seed=3)
    assert again.token_ids == base.token_ids
