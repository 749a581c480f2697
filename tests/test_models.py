"""The tiny test models can fail the identical-output tests.

A test comparing percache's greedy tokens with plain ``generate`` only proves something if the
tokens depend on the prompt. These tests check, on every tiny family, that greedy continuations
of different prompts differ (with the default weight init of transformers they often do not:
see :data:`tests.models.TINY_INIT_RANGE`), and, as a negative control, that the cold/warm
identity check fails when the store serves K/V computed for another chunk of the same length
at the same positions.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import percache_plugin as percache
from tests.helpers import SEGMENTS, baseline, tiny_pair
from tests.models import EXTRA_FAMILIES, TINY_FAMILIES

ALL_FAMILIES = (*TINY_FAMILIES, *EXTRA_FAMILIES)
PROMPTS = [
    SEGMENTS,
    [*SEGMENTS[:-1], "Who brings the projector?"],
    [*SEGMENTS[:2], "New chat: Dana joins at 7pm.", SEGMENTS[-1]],
    [SEGMENTS[0], "Mail from Eve: the party is on Sunday.", *SEGMENTS[2:4], "When is the party?"],
    [SEGMENTS[0], SEGMENTS[3], SEGMENTS[1], SEGMENTS[2], "Who owns slides?"],
]
# Two chunks of the same length in bytes (so in tokens), stored at the same positions, and a
# short question: the mistral and cohere2 sliding windows (8) must still reach the chunk.
REAL = "Mail from Ana: rehearsal moved to Friday 6pm."
OTHER = "Mail from Eve: rehearsal moved to Monday 7am."
GEN = {"max_new_tokens": 8, "do_sample": False}


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_greedy_tokens_depend_on_the_prompt(family: str) -> None:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok)
    with pc.disabled():
        outs = {tuple(baseline(model, pc.prompt(p).input_ids)[0]) for p in PROMPTS}
    pc.disable()
    assert len(outs) >= 2, f"{family}: every prompt gives {outs}"


def _data(path: Path) -> tuple[bytes, bytes]:
    """A safetensors file split into (length + header, tensor bytes)."""
    raw = path.read_bytes()
    end = 8 + struct.unpack("<Q", raw[:8])[0]
    return raw[:end], raw[end:]


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_identity_check_catches_another_chunks_kv(family: str, tmp_path: Path) -> None:
    """Negative control: the warm answer differs from plain generate when the stored K/V of
    ``REAL`` is replaced by the K/V of ``OTHER`` (same length, same positions, its own file
    header kept, checksums off so the store serves it)."""
    model, tok = tiny_pair(family, chat_template=False)
    real = [percache.Segment(SEGMENTS[0], "system"), percache.Segment(REAL, "chunk"),
            percache.Segment("What day?", "query")]
    other = [real[0], percache.Segment(OTHER, "chunk"), real[2]]
    pc = percache.enable(model, tok, store=tmp_path, verify_checksums=False)
    cold = pc.generate(real, **GEN)
    pc.generate(other, **GEN)
    real_piece, other_piece = pc.prompt(real).pieces[1], pc.prompt(other).pieces[1]
    assert (real_piece.start, len(real_piece.token_ids)) == (other_piece.start, len(other_piece.token_ids))
    want, want_logits = baseline(model, cold.prompt_ids)
    assert cold.token_ids == want  # the positive side: exact reuse passes the check
    pc.disable()

    files = {p.stem: p for p in (tmp_path / "kv").rglob("*.safetensors")}
    head, _ = _data(files[real_piece.key])
    _, stale = _data(files[other_piece.key])
    files[real_piece.key].write_bytes(head + stale)

    pc = percache.enable(model, tok, store=tmp_path, verify_checksums=False)
    warm = pc.generate(real, **GEN)
    pc.disable()
    assert warm.stats.nodes_reused == 2 and warm.stats.tokens_reused == real_piece.start + len(real_piece.token_ids)
    assert warm.token_ids != want, f"{family}: stale chunk K/V went unnoticed"
    # It answered the other prompt, exactly: the K/V served was OTHER's, at the right positions.
    assert warm.token_ids == baseline(model, pc.prompt(other).input_ids)[0]
    assert (warm.first_logits - want_logits).abs().max().item() > 1e-3
