"""A caller's predicted output (``generate(prediction=...)``, OpenAI's predicted outputs) is a
draft source like the others: verified, so greedy tokens are those without it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

import percache_plugin as percache
from percache_plugin.decode import DraftedDecoding, DraftHints, DraftSchedule, VerifyCost
from percache_plugin.decode.sources import PREDICTION, with_prediction
from tests.decode.test_verify import _AcceptsEverything
from tests.helpers import SEGMENTS, tiny_pair

N = 24
FREE = (1.0,)


class AsciiOnly(LogitsProcessor):
    """Only the printable ASCII bytes (ids 4-97 of the byte tokenizer): the answer decodes to a
    text that tokenizes back to the same ids, as a real model's answer does."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        keep = torch.full_like(scores, float("-inf"))
        keep[:, 4:98] = 0
        return scores + keep  # type: ignore[return-value]


def _plain(model: Any, ids: list[int]) -> list[int]:
    x = torch.tensor([ids])
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=N, do_sample=False,
                             pad_token_id=0, logits_processor=LogitsProcessorList([AsciiOnly()]))
    return out[0, len(ids):].tolist()


def _changed_in_the_middle(text: str) -> str:
    """``text`` with its middle third replaced: drafts from it are right, then wrong, then
    right again."""
    third = len(text) // 3
    return text[:third] + "".join("x" if c != "x" else "y" for c in text[third:2 * third]) + text[2 * third:]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_a_prediction_gives_plain_greedy_tokens_in_fewer_forwards(family: str) -> None:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, draft_verify_cost=FREE)
    plain = _plain(model, pc.prompt(SEGMENTS).input_ids)
    answer = tok.decode(plain)
    assert tok(answer, add_special_tokens=False)["input_ids"] == plain

    def run(prediction: str | None, **kw: Any) -> Any:
        return pc.generate(SEGMENTS, max_new_tokens=N, prediction=prediction,
                           logits_processor=LogitsProcessorList([AsciiOnly()]), **kw)

    pc.configure(draft_sources=("prompt", "output"))  # the answer is not in the prompt
    without = run(None)
    assert without.token_ids == plain and PREDICTION not in without.stats.drafted_by_source
    pc.configure(draft_sources=None)
    exact = run(answer)
    assert exact.token_ids == plain
    assert exact.stats.accepted_by_source[PREDICTION] > N // 2
    assert exact.stats.decode_forwards < without.stats.decode_forwards
    changed = _changed_in_the_middle(answer)
    near = run(changed)
    assert near.token_ids == plain  # a prediction used unverified would give changed's tokens
    assert tok(changed, add_special_tokens=False)["input_ids"] != plain
    s = near.stats
    assert 0 < s.accepted_by_source[PREDICTION] < s.drafted_by_source[PREDICTION]
    assert run("A note about something else entirely.").token_ids == plain
    pc.configure(draft_sources=("prompt", "output"))  # excluded by name
    assert PREDICTION not in run(answer).stats.drafted_by_source
    pc.configure(draft_sources=None)
    sampled = pc.generate(SEGMENTS, max_new_tokens=4, do_sample=True, prediction=answer)
    assert sampled.stats.drafting == "sampling" and not sampled.stats.drafted_by_source
    pc.close()


def test_negative_control_the_prediction_accepted_unverified_changes_the_output() -> None:
    """The source the prediction becomes, run through a verifier that keeps every draft token:
    the output follows the prediction, so the equalities above can fail."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    prompt = pc.prompt(SEGMENTS)
    plain = _plain(model, prompt.input_ids)
    hints = with_prediction(None, _changed_in_the_middle(tok.decode(plain)))
    assert hints is not None
    sources = pc.hooks.draft_sources(pc.engine.ctx, prompt, hints)
    pc.close()
    x = torch.tensor([prompt.input_ids])
    outs = {}
    for cls in (DraftedDecoding, _AcceptsEverything):
        loop = cls.from_sources(sources, prompt.input_ids, (PREDICTION,), DraftSchedule(cost=VerifyCost(FREE)))
        with torch.inference_mode():
            out = model.generate(x, max_new_tokens=N, do_sample=False, pad_token_id=0, custom_generate=loop,
                                 logits_processor=LogitsProcessorList([AsciiOnly()]))
        outs[cls] = out[0, len(prompt.input_ids):].tolist()
    assert outs[DraftedDecoding] == plain
    assert outs[_AcceptsEverything] != plain


def test_with_prediction_adds_to_the_hints_given() -> None:
    assert with_prediction(None, None) is None and with_prediction(None, "") is None
    hints = DraftHints(texts={"qa_bank": ["a"], PREDICTION: ["b"]}, token_ids={"session": [[5]]})
    got = with_prediction(hints, "c")
    assert got is not None and got.texts == {"qa_bank": ["a"], PREDICTION: ["b", "c"]}
    assert got.token_ids == hints.token_ids
    with pytest.raises(TypeError, match="prediction"):
        with_prediction(None, ["not", "a", "str"])  # type: ignore[arg-type]
