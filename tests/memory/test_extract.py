"""Parsing extraction output: valid facts kept, malformed lines dropped and counted."""

from __future__ import annotations

from percache_plugin.memory.extract import parse_facts, raw_turn_fact


def test_valid_lines_become_facts_with_a_subject() -> None:
    out = ('{"summary": "Ana adopted a cat named Miso", "datetime": "May 2023", "location": "", '
           '"participants": "Ana", "item": "cat", "detail": "a grey kitten"}\n\n'
           '{"summary": "Ben runs every Sunday morning"}\n')
    parsed = parse_facts(out)
    assert parsed.malformed == 0
    first, second = parsed.facts
    assert first.text == "Ana adopted a cat named Miso (a grey kitten)"
    assert first.metadata == {"datetime": "May 2023", "participants": "Ana", "item": "cat",
                              "detail": "a grey kitten", "subject": "Ana / cat"}
    assert second.text == "Ben runs every Sunday morning" and "subject" not in second.metadata


def test_malformed_lines_are_counted_never_stored_in_part() -> None:
    out = "\n".join([
        "Here are the facts:",                                   # prose
        '{"summary": "Ana adopted a cat", "datetime": "May',     # truncated
        '{"summary": "Ana adopted a cat", "mood": "happy"}',      # unknown key
        '{"summary": "Ana adopted a cat", "item": 3}',            # not a string
        '{"summary": "cat"}',                                     # too short
        '["Ana adopted a cat"]',                                  # not an object
        '{"summary": "Ana adopted a cat called Miso"},',          # valid (trailing comma)
    ])
    parsed = parse_facts(out)
    assert parsed.malformed == 6
    assert [f.text for f in parsed.facts] == ["Ana adopted a cat called Miso"]


def test_raw_turn_fallback() -> None:
    raw = raw_turn_fact("User: I  moved to Porto last week\nAssistant: Nice!")
    assert raw is not None and raw.text == "User: I moved to Porto last week Assistant: Nice!"
    assert raw.metadata == {"kind": "raw"}
    assert raw_turn_fact("ok") is None
