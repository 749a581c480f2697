"""The fact-line grammar: whatever the model prefers, the output is a valid prefix of
``{"summary": "...", ...}`` lines; caps, sentence ends, leads, excluded characters and the
number of lines are enforced."""

from __future__ import annotations

import json

import pytest
import torch

import percache_plugin as percache
from percache_plugin.memory.extract import parse_facts
from percache_plugin.memory.grammar import FactGrammar, GrammarError
from percache_plugin.segments import Segment
from tests.helpers import tiny_pair
from tests.tokenizer import byte_tokenizer


def _ids(tok, text: str) -> list[int]:  # type: ignore[no-untyped-def]
    return list(tok.encode(text, add_special_tokens=False))


def _walk(g: FactGrammar, tok, text: str, max_facts: int = 2, lead: str = ""):  # type: ignore[no-untyped-def]
    return g.allowed(_ids(tok, text), max_facts, _ids(tok, lead) if lead else ())


def test_structure_is_forced_and_values_are_free_text_until_the_quote() -> None:
    tok = byte_tokenizer()
    g = FactGrammar(tok, [("summary", 40), ("datetime", 3)])
    (quote,) = _ids(tok, '"')
    assert _walk(g, tok, "") == (*_ids(tok, "{")[:1], *g.eos)  # open a fact or end
    assert _walk(g, tok, '{"summ') == tuple(_ids(tok, "a"))
    inside = _walk(g, tok, '{"summary": "Ana')
    assert isinstance(inside, torch.Tensor)
    assert bool(inside[_ids(tok, "x")[0]]) and not bool(inside[quote]) and not bool(inside[_ids(tok, "\n")[0]])
    assert _walk(g, tok, '{"summary": "Ana moved"') == tuple(_ids(tok, ","))
    assert _walk(g, tok, '{"summary": "Ana moved", "datetime": "May') == (quote,)  # cap of 3
    assert _walk(g, tok, '{"summary": "Ana moved", "datetime": "May"') == tuple(_ids(tok, "}"))
    assert _walk(g, tok, '{"summary": "A", "datetime": ""}\n{"summary": "B", "datetime": ""}\n') == g.eos


def test_sentence_end_closes_a_value_and_lead_is_written_by_the_program() -> None:
    tok = byte_tokenizer()
    g = FactGrammar(tok, [("summary", 40)])
    (quote,) = _ids(tok, '"')
    assert _walk(g, tok, '{"summary": "Ana moved.') == (quote,)
    assert _walk(g, tok, '{"summary": "', lead="Ana") == tuple(_ids(tok, "A"))
    assert _walk(g, tok, '{"summary": "An', lead="Ana") == tuple(_ids(tok, "a"))
    assert isinstance(_walk(g, tok, '{"summary": "Ana', lead="Ana"), torch.Tensor)
    assert _walk(g, tok, "", max_facts=0) == g.eos
    with pytest.raises(GrammarError, match="quotes"):
        g.processor(1, 'A"na')


def test_excluded_characters_never_appear_in_values() -> None:
    tok = byte_tokenizer()
    g = FactGrammar(tok, [("summary", 40)], exclude=":")
    assert not bool(g.content[_ids(tok, ":")[0]]) and bool(g.content[_ids(tok, ";")[0]])
    assert bool(FactGrammar(tok, [("summary", 40)]).content[_ids(tok, ":")[0]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_random_model_under_the_grammar_writes_only_valid_lines(seed: int) -> None:
    torch.manual_seed(seed)
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off")
    g = FactGrammar(tok, [("summary", 12), ("item", 4)])
    free = pc.generate([Segment("s", "system"), Segment("facts?", "query")], max_new_tokens=60,
                       do_sample=False)
    gen = pc.generate([Segment("s", "system"), Segment("facts?", "query")], max_new_tokens=200,
                      do_sample=False, logits_processor=[g.processor(3, "Ana")])
    lines = [json.loads(line) for line in gen.text.splitlines() if line]
    assert 1 <= len(lines) <= 3 or gen.text == ""
    assert all(list(o) == ["summary", "item"] and o["summary"].startswith("Ana") for o in lines)
    assert parse_facts(free.text).facts == []  # unconstrained, the same model writes no valid line
    pc.disable()


def test_bad_grammars_are_refused_with_the_cause() -> None:
    tok = byte_tokenizer()
    with pytest.raises(GrammarError, match="at least one field"):
        FactGrammar(tok, [])
    with pytest.raises(GrammarError, match="cap"):
        FactGrammar(tok, [("summary", 0)])
    with pytest.raises(GrammarError, match="max_facts"):
        FactGrammar(tok, [("summary", 3)]).processor(-1)
