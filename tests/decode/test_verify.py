"""Greedy decoding with verified drafts gives exactly the tokens of plain decoding."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

import percache_plugin as percache
from percache_plugin.decode import (
    DraftedDecoding,
    DraftHints,
    DraftIndex,
    DraftSchedule,
    DraftSource,
    VerifyCost,
    greedy_reason,
    prompt_source,
)
from tests.helpers import SEGMENTS, baseline, tiny_pair
from tests.models import TINY_FAMILIES

N = 24
FREE = (1.0,)  # verify forwards priced as one-token forwards: every draft found is verified


def _near_miss(ids: list[int]) -> list[int]:
    """The answer with every fifth token changed: drafts from it are partly wrong."""
    return [(t + 7) % 250 + 3 if i % 5 == 4 else t for i, t in enumerate(ids)]


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_each_source_gives_plain_greedy_tokens(family: str) -> None:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, draft_verify_cost=FREE)
    prompt = pc.prompt(SEGMENTS)
    plain, _ = baseline(model, prompt.input_ids, max_new_tokens=N)
    hints = DraftHints(texts={"qa_bank": [tok.decode(_near_miss(plain))]},
                       token_ids={"session": [_near_miss(plain)[:12]]})
    for only in (("prompt",), ("qa_bank",), ("session",), ("output",), None):
        pc.configure(draft_sources=only)
        for _ in range(2):  # a miss, then exact reuse of the stored chunks
            gen = pc.generate(SEGMENTS, max_new_tokens=N, drafts=hints)
            assert gen.token_ids == plain, (family, only)
            s = gen.stats
            assert s.drafting == "on" and s.new_tokens == len(plain)
            assert s.forwards_saved == s.new_tokens - s.decode_forwards
            assert 1 <= s.first_forward_tokens <= s.new_tokens
            assert s.tokens_accepted <= s.tokens_drafted
        if only in (("qa_bank",), ("session",)):  # text round trips may differ: only ids must be kept
            assert s.tokens_drafted > 0 and set(s.drafted_by_source) == set(only)
            assert s.tokens_accepted > 0 or only == ("qa_bank",)
    assert pc.stats().tokens_drafted > 0
    pc.close()


def test_shifted_reuse_keeps_working_with_drafts() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, reuse="shifted", recompute="none", drafting=False,
                         draft_verify_cost=FREE)
    pc.generate(SEGMENTS, max_new_tokens=2)
    swapped = [SEGMENTS[0], SEGMENTS[2], SEGMENTS[1], SEGMENTS[3]]
    plain = pc.generate(swapped, max_new_tokens=N)  # decoded plainly over the shifted chunks
    assert plain.stats.tokens_shifted > 0
    pc.configure(drafting=True)
    for ids in (plain.token_ids, _near_miss(plain.token_ids)):
        gen = pc.generate(swapped, max_new_tokens=N, drafts=DraftHints(token_ids={"session": [ids]}))
        assert gen.stats.tokens_shifted == plain.stats.tokens_shifted and gen.stats.tokens_accepted > 0
        assert gen.token_ids == plain.token_ids
    pc.close()


class _AcceptsEverything(DraftedDecoding):
    """A verifier bug: every draft token stands, whatever the model chose."""

    def accept(self, draft: tuple[int, ...], chosen: int, i: int) -> bool:
        return True


def test_negative_control_a_wrong_draft_accepted_changes_the_output() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    ids = pc.prompt(SEGMENTS).input_ids
    pc.close()  # the loops below run on the bare model
    plain, _ = baseline(model, ids, max_new_tokens=N)
    wrong = DraftSource("qa_bank", (tuple(_near_miss(plain)),), anchored=True)
    x = torch.tensor([ids])
    outs = {}
    for cls in (DraftedDecoding, _AcceptsEverything):
        loop = cls(DraftIndex([wrong], ids), DraftSchedule(cost=VerifyCost(FREE)))
        with torch.inference_mode():
            out = model.generate(x, max_new_tokens=N, do_sample=False, pad_token_id=0, custom_generate=loop)
        outs[cls] = out[0, len(ids):].tolist()
    assert outs[DraftedDecoding] == plain
    assert outs[_AcceptsEverything] != plain  # the equality checks above can fail


class _StopAfter(StoppingCriteria):
    def __init__(self, n_prompt: int, n: int) -> None:
        self.n_prompt, self.n = n_prompt, n

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        return torch.full((1,), input_ids.shape[1] - self.n_prompt >= self.n,  # type: ignore[return-value]
                          dtype=torch.bool)


def test_caller_stopping_criteria_eos_and_limits_are_respected() -> None:
    model, tok = tiny_pair("qwen2")
    pc = percache.enable(model, tok, draft_verify_cost=FREE)
    prompt = pc.prompt(SEGMENTS)
    plain, _ = baseline(model, prompt.input_ids, max_new_tokens=N)
    hints = DraftHints(token_ids={"session": [plain]})
    stop = StoppingCriteriaList([_StopAfter(prompt.n_tokens, 5)])
    gen = pc.generate(SEGMENTS, max_new_tokens=N, drafts=hints, stopping_criteria=stop)
    assert gen.token_ids == plain[:5]
    gen = pc.generate(SEGMENTS, max_new_tokens=7, drafts=hints)
    # one forward: the pending token and the 6 draft tokens that can still be kept
    assert gen.token_ids == plain[:7] and gen.stats.tokens_drafted == gen.stats.tokens_accepted == 6
    assert gen.stats.decode_forwards == 1
    eos = plain[3]
    gen = pc.generate(SEGMENTS, max_new_tokens=N, drafts=hints, eos_token_id=eos)
    assert gen.token_ids == plain[:plain.index(eos) + 1]
    pc.close()


def test_sampling_and_the_switch_decode_plainly() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    assert pc.generate(SEGMENTS, max_new_tokens=4, do_sample=True).stats.drafting == "sampling"
    assert greedy_reason(model, {"num_beams": 2}) == "beam search"
    assert greedy_reason(model, {}) == ""
    pc.configure(drafting=False)
    gen = pc.generate(SEGMENTS, max_new_tokens=4)
    assert gen.stats.drafting == "off" and gen.stats.tokens_drafted == 0
    assert gen.stats.first_forward_tokens == 1  # plain decoding: one token per forward
    with pytest.raises(percache.ConfigError, match="drafting"):
        pc.configure(drafting="yes")
    with pytest.raises(percache.ConfigError, match="draft_sources"):
        pc.configure(draft_sources="prompt")
    pc.close()


def test_padding_and_full_cache_are_refused() -> None:
    model, _ = tiny_pair("llama")
    loop = DraftedDecoding(DraftIndex([prompt_source([5, 6, 7])], [5, 6, 7]))
    x = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="padding"), torch.inference_mode():
        model.generate(x, attention_mask=torch.tensor([[0, 1, 1]]), max_new_tokens=3, do_sample=False,
                       pad_token_id=0, custom_generate=loop)


@pytest.mark.parametrize("eviction", ["exact", "masked"])
def test_chat_turns_draft_from_earlier_replies_and_equal_plain_decoding(eviction: str) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, session_kv_tokens=400, session_eviction=eviction,
                         draft_verify_cost=FREE)
    pc.sessions.create("s", system="Be brief.")
    drafted: dict[str, int] = {}
    for i in range(6):
        reply = pc.chat("When is the rehearsal?", session="s", max_new_tokens=16, do_sample=False)
        with pc.disabled():
            want, _ = baseline(model, reply.prompt_ids, 16)
        assert reply.token_ids == want, f"turn {i + 1}"
        for name, n in reply.stats.drafted_by_source.items():
            drafted[name] = drafted.get(name, 0) + n
    assert drafted.get("session", 0) > 0
    pc.close()


def test_models_deriving_positions_from_input_ids_get_generates_positions() -> None:
    """RoBERTa-family causal LMs derive positions from input ids (``padding_idx + 1`` offset)
    when none are passed; the drafted loop passes generate's own ``position_ids``, so cached
    first-token logits and greedy tokens equal plain decoding."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.tokenizer import byte_tokenizer

    config = AutoConfig.for_model(
        "roberta", vocab_size=260, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=1024, is_decoder=True, pad_token_id=1,
        bos_token_id=0, eos_token_id=2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    pc = percache.enable(model, byte_tokenizer(), draft_verify_cost=FREE)
    plain, first = baseline(model, pc.prompt(SEGMENTS).input_ids, max_new_tokens=6)
    for _ in range(2):  # chunks computed and stored, then served from the store
        gen = pc.generate(SEGMENTS, max_new_tokens=6)
        assert gen.stats.drafting == "on"
        assert gen.first_logits is not None
        assert float((gen.first_logits.float() - first).abs().max()) < 1e-4
        assert gen.token_ids == plain
    assert gen.stats.tokens_reused > 0
    pc.close()


def test_drafts_that_cannot_pay_are_declined() -> None:
    """Verify forwards priced at 100 one-token forwards: drafts are found but none is verified,
    and decoding is plain greedy decoding, one forward per token."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, draft_verify_cost=(100.0,))
    plain, _ = baseline(model, pc.prompt(SEGMENTS).input_ids, max_new_tokens=N)
    gen = pc.generate(SEGMENTS, max_new_tokens=N, drafts=DraftHints(token_ids={"session": [plain]}))
    s = gen.stats
    assert gen.token_ids == plain and s.tokens_drafted == 0 and s.drafts_declined > 0
    assert s.decode_forwards == len(plain)
    with pytest.raises(percache.ConfigError, match="draft_verify_cost"):
        pc.configure(draft_verify_cost=(1.0, -2.0))
    pc.close()


class _TieWithRunnerUp:
    """Gives the runner-up the top score: every step is an exact tie (argmax takes the lower id)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()
        top = torch.topk(scores, 2, dim=-1)
        scores.scatter_(-1, top.indices[:, 1:], top.values[:, :1])
        return scores  # type: ignore[return-value]


def test_near_ties_in_verify_forwards_are_counted() -> None:
    from transformers import LogitsProcessorList

    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    ids = pc.prompt(SEGMENTS).input_ids
    pc.close()
    x = torch.tensor([ids])
    counts = {}
    for tie in (False, True):
        procs = LogitsProcessorList([_TieWithRunnerUp()] if tie else [])
        with torch.inference_mode():
            ref = model.generate(x, max_new_tokens=N, do_sample=False, pad_token_id=0, logits_processor=procs)
        answer = ref[0, len(ids):].tolist()
        loop = DraftedDecoding(DraftIndex([DraftSource("qa_bank", (tuple(answer),), anchored=True)], ids),
                               DraftSchedule(cost=VerifyCost(FREE)))
        with torch.inference_mode():
            out = model.generate(x, max_new_tokens=N, do_sample=False, pad_token_id=0,
                                 logits_processor=procs, custom_generate=loop)
        assert out[0, len(ids):].tolist() == answer
        assert loop.counts.accepted > 0
        counts[tie] = loop.counts.near_ties
    assert counts[False] == 0
    # every token chosen in a forward that fed draft tokens was a tie
    assert counts[True] == loop.counts.new_tokens - 1 if loop.counts.forwards == 1 else counts[True] > 0


@pytest.mark.parametrize("case", ["gap_below", "gap_above", "exact_tie", "runner_up_minus_inf", "top_plus_inf",
                                  "all_minus_inf", "one_score", "random"])
def test_the_near_tie_check_is_the_top_two_gap(case: str) -> None:
    """The check (a max and a compare, no topk) says what the gap of the top two scores says:
    below NEAR_TIE with a finite runner-up, infinities never a tie."""
    from percache_plugin.decode.verify import NEAR_TIE, _near_tie

    row = torch.randn(1, 40, generator=torch.Generator().manual_seed(3))
    top = float(row.max())
    runner = {"gap_below": top - NEAR_TIE / 2, "gap_above": top - 2 * NEAR_TIE, "exact_tie": top,
              "runner_up_minus_inf": None, "top_plus_inf": top}.get(case)
    if runner is not None:
        row[0, int(row.argmin())] = runner
    if case == "runner_up_minus_inf":
        row[:] = float("-inf")
        row[0, 5] = 1.0
    if case == "top_plus_inf":
        row[0, 7] = float("inf")
    if case == "all_minus_inf":
        row[:] = float("-inf")
    if case == "one_score":
        row = row[:, :1]
    two = torch.topk(row[0], min(2, row.shape[1])).values
    expected = row.shape[1] > 1 and bool(torch.isfinite(two[1])) and float(two[0] - two[1]) < NEAR_TIE
    assert _near_tie(row) == expected
    assert expected == (case in ("gap_below", "exact_tie"))


def test_a_stop_inside_a_draft_is_not_counted_as_its_rejection() -> None:
    """eos chosen in the middle of a correct draft: the tokens after it were fed but never
    judged, so the draft's kind keeps a clean record (it used to count one rejection)."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    ids = pc.prompt(SEGMENTS).input_ids
    pc.close()
    plain, _ = baseline(model, ids, max_new_tokens=N)
    stop = next(i for i in range(3, N) if plain[i] not in plain[:i])
    loop = DraftedDecoding(DraftIndex([DraftSource("qa_bank", (tuple(plain),), anchored=True)], ids),
                           DraftSchedule(cost=VerifyCost(FREE)))
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=N, do_sample=False, pad_token_id=0,
                             eos_token_id=plain[stop], custom_generate=loop)
    assert out[0, len(ids):].tolist() == plain[:stop + 1]
    assert loop.counts.forwards == 1 and loop.counts.drafted > stop  # fed past the stop
    assert loop.counts.first_tokens == stop + 1  # the first forward emitted the whole answer
    tally = loop.schedule.tallies["qa_bank/prefix"]
    assert tally.rejected == 0 and tally.accepted == stop


def test_the_first_forward_verifies_no_one_token_match() -> None:
    """The prompt's last token occurs earlier in it, but no two-token run does: the prompt
    forward computes the prompt alone (it used to append the one-token match's draft, which
    lengthened every prefill and changed its rounding against a plain prefill); later
    forwards still draft from one-token matches."""
    model, tok = tiny_pair("llama")
    ids = [5, 9, 17, 33, 41, 9, 60, 71, 83, 9]  # 9 occurs before; (83, 9) does not
    plain, _ = baseline(model, ids, max_new_tokens=N)
    loop = DraftedDecoding(DraftIndex([prompt_source(ids)], ids, min_ngram=1), DraftSchedule(cost=VerifyCost(FREE)))
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=N, do_sample=False, pad_token_id=0,
                             custom_generate=loop)
    assert out[0, len(ids):].tolist() == plain
    assert loop.counts.forward_s[0][0] == 0  # no draft token fed with the prompt
    assert loop.counts.first_tokens == 1
    anchored = DraftedDecoding(DraftIndex([DraftSource("qa_bank", (tuple(plain),), anchored=True)], ids),
                               DraftSchedule(cost=VerifyCost(FREE)))
    with torch.inference_mode():
        model.generate(torch.tensor([ids]), max_new_tokens=N, do_sample=False, pad_token_id=0,
                       custom_generate=anchored)
    assert anchored.counts.forward_s[0][0] > 0  # an earlier answer by prefix still rides along
