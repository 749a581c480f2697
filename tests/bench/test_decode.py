"""bench decode's splits and mode choice (no model needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from percache_plugin.bench.decode import PARAPHRASES, _pairs, answer_row, run_benchmark, summarize
from tests.helpers import SEGMENTS, tiny_pair


def test_skip_gives_a_split_disjoint_from_the_first_meetings() -> None:
    dev = _pairs(PARAPHRASES, 5, 20)
    held_out = _pairs(PARAPHRASES, 5, 20, skip=5)
    assert sum(map(len, dev.values())) == 20 and sum(map(len, held_out.values())) == 20
    assert not set(dev) & set(held_out)
    assert list(_pairs(PARAPHRASES, 10, 999))[5:10] == list(_pairs(PARAPHRASES, 5, 999, skip=5))


def test_unknown_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown decode modes"):
        run_benchmark(None, None, Path("."), meetings=1, questions=1, new_tokens=1, repeats=1, modes=("nope",))


def _run(s: float, forwards: int, ids: list[int] | None = None, new: int = 10) -> dict[str, object]:
    return {"ids": ids or [1, 2], "s": s, "new": new, "forwards": forwards, "drafted": 4, "accepted": 2,
            "trees": 1}


def test_an_answers_speedup_is_the_median_of_same_round_ratios() -> None:
    # round 2 ran under load (both modes slow): per-round ratios 2.0, 2.0, 1.0 -> median 2.0,
    # where the ratio of the medians of speed would give 1.0 / 0.5 = 2.0 too, but round 3's
    # plain-only slowdown (ratio 4.0) must not move the median
    runs = {"plain": [_run(1.0, 10), _run(2.0, 10), _run(4.0, 10)],
            "combined": [_run(0.5, 6), _run(1.0, 6), _run(1.0, 6)]}
    row = answer_row(runs, ("combined",))
    assert row["combined"]["speedup"] == 2.0
    assert (row["combined"]["speedup_low"], row["combined"]["speedup_high"]) == (2.0, 4.0)
    assert row["combined"]["forwards"] == 6 and not row["combined"]["more_forwards"]
    assert row["combined"]["identical"]


def test_summary_separates_noise_from_real_slowdowns() -> None:
    noisy = answer_row({"plain": [_run(1.0, 10), _run(1.0, 10), _run(1.0, 10)],
                        "combined": [_run(1.2, 10), _run(0.9, 10), _run(1.1, 10)]}, ("combined",))
    slow = answer_row({"plain": [_run(1.0, 10), _run(1.0, 10), _run(1.0, 10)],
                       "combined": [_run(1.2, 12, [1, 3]), _run(1.3, 12), _run(1.2, 12)]}, ("combined",))
    s = summarize([noisy, slow], ("combined",))["combined"]
    assert s["slower_than_5pct"] == 2  # medians 1/1.1 and 1/1.2
    assert s["slower_every_round"] == 1  # the noisy answer was faster in one round
    assert s["more_forwards_than_plain"] == 1 and s["not_identical"] == 1
    assert s["forwards"] == 22 and s["tree_forwards"] == 2


def _timed_run(s: float, ttft: float, new: int, first: int = 1) -> dict[str, object]:
    return {**_run(s, 10, new=new), "ttft": ttft, "decode_s": s - ttft, "first": first}


def test_decode_speedup_leaves_out_the_first_forward() -> None:
    # plain: 0.5 s to the first token, 32 more tokens in 4.0 s; drafted: its first forward (0.6 s)
    # also accepted 3 draft tokens, the other 29 tokens took 1.45 s: decode 20 vs 8 tok/s = 2.5x,
    # while the whole request runs 33 tokens in 4.5 s vs 2.05 s (2.2x)
    plain, drafted = _timed_run(4.5, 0.5, 33), _timed_run(2.05, 0.6, 33, first=4)
    row = answer_row({"plain": [plain], "combined": [drafted]}, ("combined",))
    cell = row["combined"]
    assert cell["decode_speedup"] == pytest.approx(2.5)
    assert cell["speedup"] == pytest.approx(4.5 / 2.05)
    assert cell["ttft_ratio"] == pytest.approx(1.2)
    s = summarize([row], ("combined",))["combined"]
    assert s["median_decode_speedup"] == pytest.approx(2.5) and s["decode_answers"] == 1
    # an answer the first forward finished has no decode phase: left out, not counted as fast
    done = answer_row({"plain": [plain], "combined": [_timed_run(0.6, 0.6, 33, first=33)]}, ("combined",))
    assert done["combined"]["decode_speedup"] is None
    assert summarize([done], ("combined",))["combined"]["decode_answers"] == 0


def test_every_mode_and_round_starts_from_its_own_draft_history() -> None:
    from types import SimpleNamespace

    from percache_plugin.bench.decode import _clean_history
    from percache_plugin.decode.acceptance import AcceptanceHistory, Tally

    pc = SimpleNamespace(engine=SimpleNamespace(draft_history=None))
    start: dict[str, AcceptanceHistory] = {}
    _clean_history(pc, "combined", start)
    pc.engine.draft_history.merge({"prompt/4": Tally(5.0, 1.0)})  # what one round learned
    _clean_history(pc, "combined", start)  # the next round starts where the first one did
    assert pc.engine.draft_history.get("prompt/4").seen == 0
    _clean_history(pc, "tree", start)
    assert pc.engine.draft_history is not start["tree"] and start.keys() == {"combined", "tree"}


def test_the_fixed_and_online_modes_set_the_measured_verify_cost_and_combined_keeps_the_default() -> None:
    from types import SimpleNamespace

    from percache_plugin.bench.decode import _timed
    from percache_plugin.decode.sources import DraftHints

    calls: list[dict[str, object]] = []
    stats = SimpleNamespace(new_tokens=2, decode_forwards=1, tokens_drafted=1, tokens_accepted=1, tokens_reused=0,
                            draft_tree_forwards=0, ttft_s=0.1, total_s=0.2, first_forward_tokens=1,
                            draft_cost_curve="built-in")
    pc = SimpleNamespace(configure=lambda **kw: calls.append(kw),
                         generate=lambda *a, **kw: SimpleNamespace(token_ids=[1, 2], stats=stats))
    for mode in ("fixed", "combined", "online", "combined"):
        _timed(pc, [], 2, DraftHints(), mode, False, False)
    assert [c["draft_cost_online"] for c in calls] == [False, False, True, False]


def test_the_builtin_mode_gives_the_builtin_curve_and_combined_the_handles_default() -> None:
    import percache_plugin as percache
    from percache_plugin.bench.decode import _timed
    from percache_plugin.decode import SMOLLM2_CPU_COST, SMOLLM2_CPU_COST_PACKED
    from percache_plugin.decode.sources import DraftHints

    model, tok = tiny_pair("llama")
    with percache.enable(model, tok) as pc:
        pc.engine.drafts.curves.put(pc.fingerprint, model, pc.engine.drafts.packs(pc.config), (1.5, 1.6))
        combined = _timed(pc, SEGMENTS, 4, DraftHints(), "combined", False, False)
        assert pc.config.draft_verify_cost is None and combined["curve"] == "measured now"
        builtin = _timed(pc, SEGMENTS, 4, DraftHints(), "builtin", False, False)
        assert builtin["curve"] == "given"
        assert pc.config.draft_verify_cost in (SMOLLM2_CPU_COST.ratios, SMOLLM2_CPU_COST_PACKED.ratios)


def test_verify_cost_option_parses_a_curve_and_names_bad_input() -> None:
    from percache_plugin.bench.decode_curve import parse_curve as _curve

    assert _curve(None) is None
    assert _curve("1.6, 1.7,2") == (1.6, 1.7, 2.0)
    for bad in ("", "1,x", "1,-2", "0"):
        with pytest.raises(SystemExit, match="--verify-cost"):
            _curve(bad)
