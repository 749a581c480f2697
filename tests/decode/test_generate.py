"""run_generate over percache's cache on a model whose config turns the cache off (MPT)."""

from __future__ import annotations

import pytest
import torch

import percache_plugin as percache
from percache_plugin.conformance.families import build_family
from percache_plugin.conformance.tiny import byte_tokenizer
from tests.helpers import Recorder

SEGMENTS = ["System.", "alpha beta gamma " * 2, "Q?"]


def test_generate_uses_the_cache_when_the_config_says_use_cache_false() -> None:
    # MptConfig.use_cache is False: generate() then fed the whole sequence at every step on top
    # of the cache it was given, and MPT's attention saw keys past its ALiBi table.
    model = build_family("mpt")
    model.config.max_seq_len = 128
    assert model.config.use_cache is False
    tok = byte_tokenizer()
    pc = percache.enable(model, tok)
    with pc.disabled():
        want = pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False)
    ids = torch.tensor([want.prompt_ids])
    assert 64 < ids.shape[1] < 120
    ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4,
                         do_sample=False, use_cache=True, pad_token_id=tok.eos_token_id)
    assert want.token_ids == ref[0, ids.shape[1]:].tolist()
    pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False)
    warm = pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False)
    assert warm.stats.tokens_reused > 0 and warm.token_ids == want.token_ids
    with pytest.raises(ValueError, match="use_cache=False"):
        pc.generate(SEGMENTS, max_new_tokens=2, do_sample=False, use_cache=False)
    pc.close()


def test_token_type_ids_are_refused_whatever_the_drafting() -> None:
    # K/V stored or recycled for a prompt was computed without token types; GPT-2 adds their
    # embedding at every position, so serving that K/V to a call with token_type_ids would
    # give another output than the model's own generate. Refused, with drafting on or off.
    from tests.helpers import tiny_pair

    for drafting in (True, False):
        model, tok = tiny_pair("gpt2")
        pc = percache.enable(model, tok, drafting=drafting, predict="off")
        n = len(pc.generate(SEGMENTS, max_new_tokens=1, do_sample=False).prompt_ids)
        types = torch.ones((1, n), dtype=torch.long)
        with pytest.raises(ValueError, match="token_type_ids"):
            pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False, token_type_ids=types)
        with pytest.raises(ValueError, match="token_type_ids"):
            pc.complete("a plain prompt", max_new_tokens=4, token_type_ids=torch.ones((1, 3), dtype=torch.long))
        assert pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False).token_ids  # still usable
        pc.close()



def test_a_streamer_gets_every_token_with_drafting_as_without() -> None:
    # generate() hands a callable custom_generate only the arguments _sample lacks: the
    # streamer got the prompt and then nothing, not even end(), while drafting was on.
    model = build_family("llama")
    tok = byte_tokenizer()
    seen = {}
    for drafting in (False, True):
        with percache.enable(model, tok, drafting=drafting) as pc:
            rec = Recorder()
            g = pc.generate(["notes: the cat sat on the mat. the cat sat.", "the cat"],
                            streamer=rec, max_new_tokens=8, do_sample=False)
            assert g.stats.drafting == ("on" if drafting else "off")
            assert rec.ended == 1
            assert [t for p in rec.puts[1:] for t in p] == g.token_ids
            seen[drafting] = rec.puts
    assert seen[True][0] == seen[False][0]  # the prompt first, once


@pytest.mark.parametrize("drafting", [False, True])
def test_stop_strings_stop_with_drafting_as_without(drafting: bool) -> None:
    # generate() hands a callable custom_generate no tokenizer: with drafting on, every call
    # with stop_strings raised "could not locate a tokenizer", even with tokenizer= given.
    model = build_family("llama")
    tok = byte_tokenizer()
    with percache.enable(model, tok, drafting=False) as pc:
        free = pc.generate(SEGMENTS, max_new_tokens=12, do_sample=False)
    stop = next(t for t in map(tok.decode, ([i] for i in free.token_ids[1:])) if t.isascii() and t.isprintable())
    with percache.enable(model, tok, drafting=drafting) as pc:
        for extra in ({"tokenizer": tok}, {}):  # without tokenizer=: the handle's own
            g = pc.generate(SEGMENTS, max_new_tokens=12, do_sample=False, stop_strings=[stop], **extra)
            assert g.stats.drafting == ("on" if drafting else "off")
            assert g.text.endswith(stop) and len(g.token_ids) < len(free.token_ids)
            assert g.token_ids == free.token_ids[:len(g.token_ids)]


def test_token_healing_is_refused_whatever_the_drafting() -> None:
    model = build_family("llama")
    tok = byte_tokenizer()
    with percache.enable(model, tok) as pc:
        with pytest.raises(ValueError, match="token_healing"):
            pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False, token_healing=True, tokenizer=tok)
