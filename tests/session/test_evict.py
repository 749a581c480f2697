"""Session budget: whole turns leave; exact eviction equals a fresh prefill of what remains."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import percache_plugin as percache
from tests.helpers import baseline, tiny_pair
from tests.session.test_legacy_masks import falcon_model
from tests.tokenizer import byte_tokenizer

MESSAGES = [f"Message number {i}: tell me about item {i * 7}." for i in range(10)]


def _kl_top1(got: torch.Tensor, want: torch.Tensor) -> tuple[float, bool]:
    p = torch.log_softmax(want.float(), -1)
    q = torch.log_softmax(got.float(), -1)
    return float((p.exp() * (p - q)).sum()), bool(got.argmax() == want.argmax())


# Falcon's attention does not go through percache's masks: 'masked' evicts exactly there.
@pytest.mark.parametrize(("family", "mode"), [("llama", "exact"), ("mistral", "exact"),
                                              ("gpt2", "exact"), ("falcon", "masked")])
def test_exact_eviction_equals_prefill_of_the_remaining_conversation(family: str, mode: str) -> None:
    model, tok = (falcon_model(), byte_tokenizer()) if family == "falcon" else tiny_pair(family)
    budget = 160
    pc = percache.enable(model, tok, session_kv_tokens=budget, session_eviction=mode)
    pc.sessions.create("s", system="Be brief.")
    evicted = 0
    for msg in MESSAGES:
        reply = pc.chat(msg, session="s", max_new_tokens=4)
        with pc.disabled():
            want, logits = baseline(model, reply.prompt_ids, 4)
        assert reply.token_ids == want
        assert (reply.first_logits - logits).abs().max().item() <= 1e-4
        session = pc.sessions.get("s")
        assert session.ephemeral_tokens <= budget
        assert reply.stats.kv_tokens <= len(session.head_ids) + budget
        evicted += reply.stats.turns_evicted
        if reply.stats.turns_evicted:
            assert reply.stats.eviction == mode and not reply.stats.approximate
            assert reply.stats.history_recomputed > 0
            assert ("masked eviction unavailable" in reply.stats.fallback) == (mode == "masked")
    assert evicted >= 3 and pc.sessions.get("s").evicted_turns == evicted
    assert pc.sessions.get("s").turns[0].turn_id > 1


def test_pinned_turns_stay() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, session_kv_tokens=120)
    pc.chat(MESSAGES[0], max_new_tokens=4)
    pc.sessions.pin("default", 1)
    for msg in MESSAGES[1:6]:
        pc.chat(msg, max_new_tokens=4)
    turns = pc.sessions.get("default").turns
    assert turns[0].turn_id == 1 and pc.sessions.get("default").evicted_turns > 0


def _run(mode: str, family: str = "llama", **cfg: object) -> list[tuple[float, bool, bool]]:
    """Per evicting turn: KL and top-1 agreement of the first logits vs a full prefill of the
    remaining conversation, and whether stats said approximate."""
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, session_kv_tokens=160, session_eviction=mode, **cfg)
    pc.sessions.create("s", system="Be brief.")
    out = []
    for msg in MESSAGES:
        reply = pc.chat(msg, session="s", max_new_tokens=4)
        session = pc.sessions.get("s")
        remaining = list(session.head_ids)
        for t in session.turns[:-1]:
            if not t.masked:
                remaining += t.ids
        remaining += session.turns[-1].user_ids
        if reply.stats.turns_evicted or any(t.masked for t in session.turns):
            with pc.disabled():
                _, logits = baseline(model, remaining, 1)
            kl, top1 = _kl_top1(reply.first_logits, logits)
            out.append((kl, top1, reply.stats.approximate))
    return out


def test_shifted_and_masked_report_kl_and_top1_against_exact() -> None:
    for mode in ("shifted", "masked"):
        rows = _run(mode)
        assert rows, mode
        assert all(approx for _, _, approx in rows), f"{mode} must say approximate"
        kl = sum(r[0] for r in rows) / len(rows)
        top1 = sum(r[1] for r in rows) / len(rows)
        print(f"{mode}: {len(rows)} turns, mean KL {kl:.4f}, top-1 {top1:.2f}")
        assert kl == kl and kl >= 0.0


def test_shifted_eviction_with_full_recompute_is_exact() -> None:
    for kl, top1, _ in _run("shifted", session_recompute_head=10_000):
        assert kl < 1e-6 and top1


def test_shifted_on_a_model_without_rope_falls_back_to_exact() -> None:
    model, tok = tiny_pair("gpt2")
    pc = percache.enable(model, tok, session_kv_tokens=120, session_eviction="shifted")
    falls = [pc.chat(m, max_new_tokens=4).stats for m in MESSAGES[:6]]
    assert any("evicted exactly" in s.fallback for s in falls)
    assert not any(s.approximate for s in falls)


def test_compacting_masked_turns_restores_exactness() -> None:
    model, tok = tiny_pair("qwen2")
    pc = percache.enable(model, tok, session_kv_tokens=160, session_eviction="masked")
    for msg in MESSAGES[:6]:
        pc.chat(msg, max_new_tokens=4)
    session = pc.sessions.get("default")
    assert any(t.masked for t in session.turns)
    resident = session.cache.get_seq_length()
    freed = pc.sessions.compact("default")
    assert freed > 0 and not any(t.masked for t in session.turns)
    reply = pc.chat(MESSAGES[6], max_new_tokens=4)
    assert reply.stats.kv_tokens < resident + reply.stats.tokens_computed
    with pc.disabled():
        want, logits = baseline(model, reply.prompt_ids, 4)
    assert reply.token_ids == want and (reply.first_logits - logits).abs().max().item() <= 1e-4


def test_shifted_eviction_of_a_turn_with_recalled_memory_is_exact() -> None:
    # later turns would keep K/V that attended to the fact, and forget could no longer find it
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, session_kv_tokens=200, session_eviction="shifted", embedder="hash",
                         predict="off", memory_recall=True, memory_threshold=0.0)
    fact = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact
    first = pc.chat("What tea does Ana drink?", memory_scope="ana", max_new_tokens=4)
    assert fact.id in first.stats.fact_ids
    stats = [pc.chat(m, max_new_tokens=4).stats for m in MESSAGES[:4]]
    evicting = next(s for s in stats if s.turns_evicted)
    assert evicting.fallback == "a turn with recalled memory facts is evicted exactly"
    assert not evicting.approximate
    assert all(not t.fact_ids for t in pc.sessions.get("default").turns)
    pc.close()


def _inexact_session(mode: str, turns: int) -> tuple[Any, list[Any]]:
    """A handle whose session "s" ran ``turns`` turns under a tight budget in ``mode``."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, session_kv_tokens=150, session_low_water=0.3, session_eviction=mode,
                         predict="off")
    pc.sessions.create("s", system="Be brief.")
    return pc, [pc.chat(f"Message {i}.", session="s", max_new_tokens=4).stats for i in range(turns)]


@pytest.mark.parametrize("mode", ["shifted", "masked"])
def test_turns_after_an_inexact_eviction_still_say_approximate(mode: str) -> None:
    # the turns after the evicting one evict nothing but still attend to shifted K/V or run with
    # masked slots left out: their replies are not those of a fresh prefill either
    pc, stats = _inexact_session(mode, 7)
    first = next(i for i, s in enumerate(stats) if s.turns_evicted)
    quiet = [s for s in stats[first + 1:] if not s.turns_evicted]
    assert quiet, "a turn after the eviction that evicts nothing"
    assert all(s.approximate for s in stats[first:]), [s.approximate for s in stats]
    assert not any(s.approximate for s in stats[:first])
    pc.close()


@pytest.mark.parametrize("mode", ["shifted", "masked"])
def test_configuring_exact_eviction_makes_the_next_turn_exact(mode: str) -> None:
    # switching the inexact mode off between turns: masked turns leave and shifted K/V is
    # computed again, where both stayed and every later turn attended to them
    pc, stats = _inexact_session(mode, 6)
    model = pc.model
    assert any(s.approximate for s in stats)
    pc.configure(session_eviction="exact")
    for i in range(3):
        reply = pc.chat(f"Later {i}.", session="s", max_new_tokens=4)
        assert not reply.stats.approximate, i
        with pc.disabled():
            want, logits = baseline(model, reply.prompt_ids, 4)
        assert reply.token_ids == want
        assert (reply.first_logits - logits).abs().max().item() <= 1e-4
    assert not any(t.masked for t in pc.sessions.get("s").turns)
    pc.close()
