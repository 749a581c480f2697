"""A fact longer than ``Config.memory_fact_tokens`` allows is refused when added or updated
(a chat turn recalling it would not fit the model's context) and dropped, counted, when
extraction finds it in idle time."""

from __future__ import annotations

import pytest

import percache_plugin as percache
from percache_plugin.decode import context_limit
from percache_plugin.idle import IdleReport, IdleTask
from percache_plugin.memory.bank import MemoryBank
from percache_plugin.memory.idle import ExtractionStats, run_extraction
from percache_plugin.rag.embeddings import HashEmbedder
from tests.helpers import tiny_pair
from tests.memory.test_idle import _Ctx

CONFIG = dict(embedder="hash", predict="off", draft_calibrate_idle=False)


def test_a_fact_longer_than_the_context_allows_is_refused() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, **CONFIG)
    context = context_limit(model)
    assert context is not None
    limit = context // (2 * pc.config.memory_k)  # the default: half the context for memory_k facts
    assert pc.memory.fact_token_limit == limit
    long = "word " * 200_000  # 1 MB: every chat turn recalling it would raise MessageTooLong
    n = len(tok(long, add_special_tokens=False)["input_ids"])
    with pytest.raises(ValueError, match=f"a fact of {n} tokens is longer than the limit of {limit} tokens"):
        pc.memory.add(long, scope="ana")
    assert pc.memory.list("ana") == []
    fitting = "Ana " + "x" * (limit - 5)  # the byte tokenizer: one token a byte
    assert len(tok(fitting, add_special_tokens=False)["input_ids"]) <= limit
    assert pc.memory.add(fitting, scope="ana").status == "added"
    pc.close()


def test_config_sets_the_limit_and_update_is_refused_too() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, memory_fact_tokens=40, **CONFIG)
    assert pc.memory.fact_token_limit == 40
    fact = pc.memory.add("Ana moved to Porto", scope="ana").fact
    with pytest.raises(ValueError, match="a fact of 61 tokens is longer than the limit of 40 tokens"):
        pc.memory.update(fact.id, "Ana moved to Porto in May, with her cat and her two old bikes")
    assert pc.memory.get(fact.id).text == "Ana moved to Porto"
    assert [e.event for e in pc.memory.history(fact.id)] == ["added"]
    with pytest.raises(percache.ConfigError, match="memory_fact_tokens"):
        percache.Config(memory_fact_tokens=0)
    pc.close()


def test_extraction_drops_and_counts_a_fact_too_long() -> None:
    bank = MemoryBank(None, HashEmbedder())
    stats = ExtractionStats()
    c = _Ctx("")
    c.ctx.config = percache.Config(embedder="hash", memory_fact_tokens=30)
    turns = '[[1, "Ana: I live in Lisbon now."], [2, "Ana: my cat Miso sleeps all day on the sofa by the window."]]'
    task = IdleTask(1, "memory_extract", '{"session": "s", "turns": ' + turns + '}', "ana", 0)
    run_extraction(c, task, IdleReport(), bank, stats, "raw")  # type: ignore[arg-type]
    assert [f.text for f in bank.list("ana")] == ["Ana: I live in Lisbon now."]
    assert stats.too_long == 1 and stats.facts_added == 1
