"""TextStream: incremental text equals a full decode; stop sequences split across tokens are
held back and cut; cancel stops generation."""

from __future__ import annotations

import torch

from percache_plugin.server.stream import TextStream
from tests.tokenizer import byte_tokenizer


def _feed(stream: TextStream, prompt: list[int], new: list[int]) -> list[bool]:
    ids, stops = list(prompt), []
    for t in new:
        ids.append(t)
        stops.append(bool(stream(torch.tensor([ids]), torch.zeros(1, 4))[0]))
        if stops[-1]:
            break
    return stops


def test_incremental_text_equals_the_full_decode_multibyte_included() -> None:
    tok = byte_tokenizer()
    text = "Grüße, 東京 — ok"
    new = tok(text, add_special_tokens=False)["input_ids"]
    sent: list[str] = []
    stream = TextStream(tok, 3, on_text=sent.append)
    assert not any(_feed(stream, [0, 5, 6], new))
    assert stream.close() == text and "".join(sent) == text
    assert all("\ufffd" not in s for s in sent)  # no half characters were sent


def test_a_stop_sequence_across_tokens_is_never_sent() -> None:
    tok = byte_tokenizer()
    new = tok("Friday at 6pm. Bring music", add_special_tokens=False)["input_ids"]
    sent: list[str] = []
    stream = TextStream(tok, 1, stop=("6pm", "xyz"), on_text=sent.append)
    stops = _feed(stream, [0], new)
    assert stops[-1] and stream.stopped_by == "stop"
    assert stream.close() == "Friday at " and "".join(sent) == "Friday at "


def test_cancel_stops_at_the_next_token() -> None:
    tok = byte_tokenizer()
    stream = TextStream(tok, 1)
    assert _feed(stream, [0], [70, 71]) == [False, False]
    stream.cancel()
    assert _feed(stream, [0, 70, 71], [72]) == [True]
    assert stream.stopped_by == "cancelled"


def test_without_the_prompt_length_the_processor_marks_it() -> None:
    tok = byte_tokenizer()
    stream = TextStream(tok, None)
    stream.processor(torch.tensor([[0, 5, 6]]), torch.zeros(1, 4))
    _feed(stream, [0, 5, 6], [70, 71])
    assert stream.close() == tok.decode([70, 71])


def test_strip_sends_the_stripped_text_only() -> None:
    tok = byte_tokenizer()
    text = " \n Friday at 6pm.\n  Bring music \n\n"
    sent: list[str] = []
    stream = TextStream(tok, 1, on_text=sent.append, strip=True)
    _feed(stream, [0], tok(text, add_special_tokens=False)["input_ids"])
    assert stream.close() == text.strip() and "".join(sent) == text.strip()
    assert len(sent) > 3 and sent[0].startswith("F")  # sent as it came, not all at the end
    blank = TextStream(tok, 1, on_text=sent.append, strip=True)
    _feed(blank, [0], tok("   ", add_special_tokens=False)["input_ids"])
    assert blank.close() == "" and "".join(sent) == text.strip()
