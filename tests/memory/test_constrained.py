"""Constrained extraction of one turn: the speaker's name leads the summary."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import percache_plugin as percache
from percache_plugin.memory.constrained import TurnGrammar, extract_turn, speaker
from percache_plugin.stats import GenerationStats
from tests.helpers import tiny_pair
from tests.tokenizer import byte_tokenizer


def test_speaker_is_the_short_name_before_the_colon() -> None:
    assert speaker("Ana: I moved") == "Ana"
    assert speaker("[1:10 pm on 8 May, 2023] Ana Lee: I moved") == "Ana Lee"
    assert speaker("I moved to Porto and then: Faro") == ""  # five words is not a name
    assert speaker("no colon here") == "" and speaker('A"b: x') == ""


def test_turn_grammar_is_built_once_per_tokenizer() -> None:
    tg = TurnGrammar()
    tok = byte_tokenizer()
    assert tg(tok) is tg(tok) and tg(byte_tokenizer()) is not tg(tok)


def test_extract_turn_fills_the_template_and_the_lead() -> None:
    seen: list[Any] = []

    def generate(segments: Any, **kw: Any) -> Any:
        seen.append((segments, kw))
        return SimpleNamespace(text='{"summary": "Ana moved to Porto."}\n',
                               stats=GenerationStats(new_tokens=9))

    tok = byte_tokenizer()
    found, _ = extract_turn(generate, TurnGrammar()(tok), "About {name}: {turn}", "Ana: I moved to Porto",
                            max_facts=1, max_new_tokens=30)
    assert [f.text for f in found.facts] == ["Ana moved to Porto."]
    segments, kw = seen[0]
    assert segments[-1].text == "About Ana: Ana: I moved to Porto"
    assert kw["max_new_tokens"] == 30 and kw["do_sample"] is False
    assert kw["logits_processor"][0].lead == tuple(tok.encode("Ana", add_special_tokens=False))


def test_a_real_tiny_model_extraction_writes_only_valid_or_counted_lines() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off", memory_extraction="model",
                         memory_extract_tokens=80, prediction_quiet_s=0.0)
    from percache_plugin.memory.idle import queue_turns
    queue_turns(pc.idle_queue, "s", [(1, "Ana: I adopted a cat named Miso."), (2, "Ben: I sing.")], "ana")
    pc.idle()
    stats = pc.memory.extraction
    assert stats.model_calls == 2 and stats.turns == 2
    for fact in pc.memory.list("ana"):  # whatever the random model wrote, it was a whole line
        assert fact.text.startswith(("Ana", "Ben")) and ":" not in fact.text
        assert fact.metadata["source"] in ("s:1", "s:2")
    pc.disable()
