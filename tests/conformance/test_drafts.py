"""The drafted-decoding checks: forced drafts give plain greedy tokens, and the checks can fail."""

from __future__ import annotations

from typing import Any

import pytest

from percache_plugin.conformance import FAIL, NA, PASS, byte_tokenizer, run_suite, tiny_model
from percache_plugin.conformance.drafts import near_misses
from percache_plugin.decode import DraftedDecoding
from percache_plugin.decode.tree import TokenTree
from percache_plugin.engine import drafting
from tests.conformance.helpers import by_name, from_config

DRAFTS = ["drafted_decoding", "draft_tree"]
GPT_NEO_LOCAL: dict[str, Any] = {"hidden_size": 64, "num_heads": 4, "num_layers": 2,
                                 "attention_types": [[["global", "local"], 1]], "window_size": 8,
                                 "initializer_range": 0.2}


def test_near_misses_are_wrong_every_nth_token_only() -> None:
    plain = list(range(10, 22))
    for got, n in zip(near_misses(plain, 320), (3, 4, 5), strict=True):
        wrong = [i for i, (a, b) in enumerate(zip(got, plain, strict=True)) if a != b]
        assert wrong == [i for i in range(len(plain)) if i % n == n - 1]


def test_chains_and_trees_pass_where_trees_apply() -> None:
    report = run_suite(tiny_model("llama"), byte_tokenizer(), checks=DRAFTS)
    results = by_name(report)
    assert [r.status for r in report.results] == [PASS, PASS], report.results
    for r in report.results:  # verification kept some draft tokens and rejected others
        assert 0 < r.outcome.details["tokens_accepted"] < r.outcome.details["tokens_drafted"]
    assert results["draft_tree"].outcome.details["tree_forwards"] > 0
    assert results["drafted_decoding"].outcome.details["tree_forwards"] == 0


@pytest.mark.parametrize(("model", "reason"), [
    (lambda: tiny_model("mistral"), "sliding-window attention"),
    (lambda: from_config("gpt_neo", **GPT_NEO_LOCAL), "local attention"),
    (lambda: from_config("falcon", hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                         alibi=True), "ALiBi"),
])
def test_tree_check_is_not_applicable_where_trees_are_off(model: Any, reason: str) -> None:
    results = by_name(run_suite(model(), byte_tokenizer(), checks=DRAFTS))
    assert results["drafted_decoding"].status == PASS, results["drafted_decoding"].outcome
    tree = results["draft_tree"].outcome
    assert tree.status == NA and reason in tree.message, tree


class _AcceptsEverything(DraftedDecoding):
    def accept(self, draft: tuple[int, ...], chosen: int, i: int) -> bool:
        return True


class _FollowsFirstChild(DraftedDecoding):
    def follow(self, tree: TokenTree, node: int, chosen: int) -> int:
        return next((i for i, p in enumerate(tree.parents) if p == node), -1)


@pytest.mark.parametrize(("broken", "check"), [(_AcceptsEverything, "drafted_decoding"),
                                               (_FollowsFirstChild, "draft_tree")])
def test_a_wrong_verification_fails_the_check(monkeypatch: pytest.MonkeyPatch, broken: type,
                                              check: str) -> None:
    monkeypatch.setattr(drafting, "DraftedDecoding", broken)  # the engine builds the broken loop
    result = by_name(run_suite(tiny_model("llama"), byte_tokenizer(), checks=[check]))[check]
    assert result.status == FAIL, result.outcome
    assert "tokens diverge from plain greedy decoding at new token" in result.outcome.message


def test_trees_forced_on_over_local_attention_fail_the_tree_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # What trees did before they were turned off for GPT-Neo's local layers: the tree's 4D mask
    # replaced the model's window, and the tokens were not plain greedy decoding's.
    monkeypatch.setattr(drafting, "tree_usable", lambda model, extra_mask: True)
    result = by_name(run_suite(from_config("gpt_neo", **GPT_NEO_LOCAL), byte_tokenizer(),
                               checks=["draft_tree"]))["draft_tree"]
    assert result.status == FAIL, result.outcome
    assert "token-tree drafting: tokens diverge" in result.outcome.message
