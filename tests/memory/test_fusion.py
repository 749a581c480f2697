"""Facts and raw turns in one ranking: a fact and its own source turn take one slot."""

from __future__ import annotations

from percache_plugin.memory.bank import FactHit
from percache_plugin.memory.fusion import one_slot_per_source, sources
from percache_plugin.memory.rows import Fact


def _hit(fid: str, source: str) -> FactHit:
    return FactHit(Fact(fid, f"text {fid}", "s", {"source": source} if source else {}), 1.0, 0.5)


def test_a_fact_and_its_source_turn_count_once() -> None:
    hits = [_hit("fact-a", "c:D1:3"), _hit("turn-a", "c:D1:3"), _hit("turn-b", "c:D1:5"),
            _hit("fact-b", "c:D1:5"), _hit("manual", ""), _hit("task-fact", "c:D1:3,c:D1:7"),
            _hit("turn-c", "c:D2:1")]
    fused = one_slot_per_source(hits, 4)
    # turn-a and fact-b repeat a source already kept: skipped, not given a slot.
    assert [h.fact.id for h in fused.hits] == ["fact-a", "turn-b", "manual", "task-fact"]
    assert fused.skipped == 2
    assert [h.fact.id for h in one_slot_per_source(hits, 10).hits][-1] == "turn-c"
    assert sources({"source": "c:D1:3,c:D1:7"}) == ("c:D1:3", "c:D1:7") and sources({}) == ()
