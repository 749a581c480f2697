"""``percache bench memory``'s replay: which LoCoMo turns go through ``pc.chat``."""

from __future__ import annotations

from percache_plugin.bench.memory_replay import chat_turns


def test_the_first_speakers_turns_are_chatted_without_their_name() -> None:
    turns = [("D1:1", "Caroline: Hey Mel!"), ("D1:2", "Melanie: Hi: how are you?"),
             ("D1:3", "Caroline: I went to a support group: it was great.")]
    assert chat_turns(turns) == ["Hey Mel!", "I went to a support group: it was great."]
    assert chat_turns([]) == []
