"""Draft proposals: anchored prefixes first, then the longest n-gram, the generation itself."""

from __future__ import annotations

import pytest

from percache_plugin.decode import DraftIndex, DraftSource, prompt_source


def test_longest_ngram_wins_and_the_latest_occurrence_is_used() -> None:
    src = prompt_source([1, 2, 3, 4, 9, 2, 3, 5, 6])
    index = DraftIndex([src], [7, 1, 2, 3])
    assert index.propose(2).tokens == (4, 9)  # 3-gram (1, 2, 3) beats the later 2-gram (2, 3)
    index = DraftIndex([src], [7, 8, 2, 3])
    assert index.propose(3).tokens == (5, 6)  # 2-gram (2, 3): latest occurrence
    assert index.propose(0) is None


def test_no_match_proposes_nothing_and_single_tokens_match_last() -> None:
    index = DraftIndex([prompt_source([1, 2, 3])], [9, 3])
    assert index.propose(4) is None  # (9, 3) is unknown and nothing follows the 3 of the source
    index = DraftIndex([prompt_source([1, 3, 5, 6, 2, 3, 7])], [9, 3])
    d = index.propose(2)  # the 1-gram (3): its latest occurrence
    assert d is not None and d.tokens == (7,) and d.match == 1
    assert DraftIndex([prompt_source([1, 3, 5])], [9, 3], min_ngram=2).propose(2) is None


def test_anchored_answers_draft_from_their_start_by_prefix() -> None:
    qa = DraftSource("qa_bank", ((5, 6, 7, 8), (5, 9)), anchored=True)
    index = DraftIndex([prompt_source([1, 2]), qa], [1, 2])
    d = index.propose(3)
    assert d is not None and d.tokens == (5, 6, 7) and d.source == "qa_bank"
    index.append(5)
    index.append(9)
    assert index.propose(3) is None  # (5, 9) is complete: nothing follows it


def test_the_generation_drafts_from_itself_unless_told_not_to() -> None:
    for from_output, want in ((True, (12, 13)), (False, None)):
        index = DraftIndex([], [0], from_output=from_output)
        for t in (10, 11, 12, 13, 10, 11):
            index.append(t)
        got = index.propose(2)
        assert (got.tokens if got else None) == want
        if got:
            assert got.source == "output"


def test_bad_sources_and_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        DraftSource("", ((1,),))
    with pytest.raises(ValueError, match="non-negative"):
        DraftSource("x", ((1, -2),))
    with pytest.raises(ValueError, match="min_ngram"):
        DraftIndex([], [], min_ngram=3, max_ngram=2)


def naive_propose(seqs: list[tuple[str, list[int]]], ctx: list[int], k: int) -> tuple[tuple[int, ...], str] | None:
    """The documented rule, by brute force: longest n-gram first; of its occurrences with a
    token after them (the latest 16 per sequence), the one agreeing with the context furthest
    back (at most 16 tokens); ties: last sequence first, latest position first."""
    for n in range(min(4, len(ctx)), 0, -1):
        gram = ctx[len(ctx) - n:]
        best, best_run = None, -1
        for name, seq in reversed(seqs):
            ends = [e for e in range(n, len(seq)) if seq[e - n:e] == gram][-16:]
            for end in reversed(ends):
                run = n
                while run < 16 and run < end and run < len(ctx) and seq[end - run - 1] == ctx[-run - 1]:
                    run += 1
                if run > best_run:
                    best, best_run = (tuple(seq[end:end + k]), name), run
        if best is not None:
            return best
    return None


def test_the_occurrence_agreeing_furthest_back_wins() -> None:
    src = prompt_source([8, 2, 3, 4, 0, 1, 2, 3, 5])  # (2, 3) twice: after 8 and after 1
    d = DraftIndex([src], [6, 8, 2, 3]).propose(2)
    assert d is not None and d.tokens == (4, 0) and d.match == 3  # (8, 2, 3), not the later (1, 2, 3)
    d = DraftIndex([src], [6, 9, 2, 3]).propose(2)
    assert d is not None and d.tokens == (5,) and d.match == 2  # a tie: the latest


def test_proposals_follow_the_rule_on_random_text() -> None:
    import random

    rng = random.Random(3)
    for _ in range(100):
        vocab = rng.choice([4, 12])
        sources = [DraftSource(name, tuple(tuple(rng.randrange(vocab) for _ in range(rng.randrange(40)))
                                           for _ in range(rng.randrange(3))))
                   for name in ("prompt", "session")]
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(1, 30))]
        index = DraftIndex(sources, prompt)
        seqs = [(s.name, list(q)) for s in sources for q in s.sequences] + [("output", [])]
        ctx = list(prompt)
        for _ in range(20):
            k = rng.randrange(1, 6)
            got = index.propose(k)
            assert (None if got is None else (got.tokens, got.source)) == naive_propose(seqs, ctx, k)
            every = index.proposals(k)
            assert (every[0] if every else None) == got  # the best candidate comes first
            assert len(set(every)) == len(every)
            token = rng.randrange(vocab)
            index.append(token)
            ctx.append(token)
            seqs[-1][1].append(token)


def test_proposals_hold_the_best_occurrence_per_source_and_ngram_length() -> None:
    prompt = prompt_source([1, 2, 3, 4, 8, 3, 5])
    session = DraftSource("session", ((7, 2, 3, 6),))
    index = DraftIndex([prompt, session], [9, 2, 3])
    got = [(d.source, d.match, d.tokens) for d in index.proposals(2)]
    # the 2-gram (2, 3) in each source; the 1-gram (3) finds the same occurrences, running
    # further back than its other one (3, 5)
    assert got == [("session", 2, (6,)), ("prompt", 2, (4, 8))]
    index = DraftIndex([prompt, session], [9, 3])
    assert [(d.source, d.match, d.tokens) for d in index.proposals(2)] == [
        ("session", 1, (6,)), ("prompt", 1, (5,))]  # the latest occurrence of each source
    assert index.proposals(0) == []


def test_alternatives_add_occurrences_with_other_continuations_as_their_own_kind() -> None:
    from percache_plugin.decode.acceptance import draft_kind

    prompt = prompt_source([1, 3, 5, 6, 2, 3, 4, 8, 3, 5, 7, 3, 4, 9])
    index = DraftIndex([prompt], [9, 2, 3], from_output=False)
    one = [(d.match, d.tokens, d.rank) for d in index.proposals(2)]
    assert one == [(2, (4, 8), 0)]  # (2, 3) once; the 1-gram (3) finds that occurrence again
    got = [(d.match, d.tokens, d.rank) for d in index.proposals(2, alternatives=3)]
    # the best occurrence per first token: (3, 5) and (3, 4) again are not new continuations
    # of the 2-gram; the 1-gram adds 3 -> 5 as the other continuation
    assert got == [(2, (4, 8), 0), (1, (5, 7), 1)]  # of equal matches the latest
    assert [draft_kind(d) for d in index.proposals(2, alternatives=3)] == ["prompt/2", "prompt/1+"]
