"""Token trees: several candidate drafts verified in one forward give plain greedy tokens."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

import percache_plugin as percache
from percache_plugin.decode import (
    DraftedDecoding,
    DraftHints,
    DraftIndex,
    DraftSchedule,
    DraftSource,
    VerifyCost,
)
from percache_plugin.decode.lookup import Draft
from percache_plugin.decode.tree import (
    TokenTree,
    keep_path,
    plan_tree,
    tree_mask,
    tree_model_reason,
    tree_usable,
)
from tests.helpers import SEGMENTS, VOCAB, baseline, tiny_pair
from tests.models import MASK_FAMILIES, TINY_FAMILIES
from tests.tokenizer import byte_tokenizer

N = 24
FREE = (1.0,)


def _wrong_every(ids: list[int], n: int, shift: int) -> list[int]:
    return [(t + shift) % 250 + 3 if i % n == n - 1 else t for i, t in enumerate(ids)]


def _sources(plain: list[int]) -> list[DraftSource]:
    # two near misses wrong at different places: the tree can branch where they disagree
    return [DraftSource("qa_bank", (tuple(_wrong_every(plain, 3, 7)), tuple(_wrong_every(plain, 4, 11))), True),
            DraftSource("session", (tuple(_wrong_every(plain, 5, 13)),), False)]


def test_plan_merges_shared_prefixes_and_branches_where_drafts_differ() -> None:
    sched = DraftSchedule(cost=VerifyCost(FREE))
    a, b = Draft((1, 2, 3), "x"), Draft((1, 5), "y")
    tree = plan_tree([a, b], sched, 8)
    assert tree is not None
    assert tree.tokens == [1, 2, 3, 5]  # a sibling gets only the chance the first child leaves
    assert tree.parents[tree.tokens.index(2)] == 0 and tree.parents[tree.tokens.index(5)] == 0
    assert tree.drafts == {a: 3, b: 2} and not tree.is_chain
    assert plan_tree([a, b], sched, 1) is not None and plan_tree([a, b], sched, 1).tokens == [1]  # type: ignore[union-attr]
    costly = DraftSchedule(cost=VerifyCost((3.0,)))
    assert plan_tree([a, b], costly, 8) is None  # no tree pays for a forward three times as dear


def test_mask_lets_each_node_see_the_cache_the_root_and_its_own_path() -> None:
    tree = TokenTree(tokens=[1, 2, 5, 3], parents=[-1, 0, 0, 1], depths=[1, 2, 2, 3])
    allowed = tree_mask(tree, 2, torch.float32, torch.device("cpu"))[0, 0] == 0
    want = [[1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 1, 0, 1]]
    assert allowed.int().tolist() == want


def test_keep_path_moves_the_walked_nodes_next_to_the_root() -> None:
    cache = DynamicCache()
    k = torch.arange(8.0).view(1, 1, 8, 1)
    cache.update(k, k + 100, 0)
    keep_path(cache, 2, [1, 3])  # root at slot 2, nodes at 3.., path = nodes 1 and 3 (slots 4 and 6)
    cache.crop(-3)
    assert cache.layers[0].keys.flatten().tolist() == [0, 1, 2, 4, 6]
    assert cache.layers[0].values.flatten().tolist() == [100, 101, 102, 104, 106]


# MASK_FAMILIES: Llama 4's chunked attention, whose mask a tree's 4D mask would replace.
@pytest.mark.parametrize("family", [*TINY_FAMILIES, *MASK_FAMILIES])
def test_trees_give_plain_greedy_tokens(family: str) -> None:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, draft_verify_cost=FREE, draft_tree=True)
    prompt = pc.prompt(SEGMENTS)
    plain, _ = baseline(model, prompt.input_ids, max_new_tokens=N)
    near = [_wrong_every(plain, 3, 7), _wrong_every(plain, 4, 11)]
    hints = DraftHints(texts={"qa_bank": [tok.decode(n) for n in near]},
                       token_ids={"session": [_wrong_every(plain, 5, 13)]})
    trees = []
    for _ in range(2):  # a miss, then exact reuse of the stored chunks (deferred cache layers)
        gen = pc.generate(SEGMENTS, max_new_tokens=N, drafts=hints)
        assert gen.token_ids == plain, family
        s = gen.stats
        assert s.drafting == "on" and s.tokens_accepted <= s.tokens_drafted
        assert s.forwards_saved == s.new_tokens - s.decode_forwards
        trees.append(s.draft_tree_forwards)
    if tree_model_reason(model):
        assert trees == [0, 0], family
    else:
        assert min(trees) > 0, family
    pc.close()


class _FollowsAnyChild(DraftedDecoding):
    """A verifier bug: the walk goes on to the first child whatever the model chose."""

    def follow(self, tree: TokenTree, node: int, chosen: int) -> int:
        for i, p in enumerate(tree.parents):
            if p == node:
                return i
        return -1


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_bare_loop_equals_generate_and_the_negative_control_fails(family: str) -> None:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok)
    ids = pc.prompt(SEGMENTS).input_ids
    pc.close()  # the loops below run on the bare model
    plain, _ = baseline(model, ids, max_new_tokens=N)
    x = torch.tensor([ids])
    outs, trees = {}, {}
    for cls in (DraftedDecoding, _FollowsAnyChild):
        loop = cls(DraftIndex(_sources(plain), ids), DraftSchedule(cost=VerifyCost(FREE)))
        loop.tree = True
        with torch.inference_mode():
            out = model.generate(x, max_new_tokens=N, do_sample=False, pad_token_id=0, custom_generate=loop,
                                 past_key_values=DynamicCache())
        outs[cls], trees[cls] = out[0, len(ids):].tolist(), loop.counts.tree_forwards
    assert outs[DraftedDecoding] == plain and trees[DraftedDecoding] > 0
    assert outs[_FollowsAnyChild] != plain  # the equality above can fail


def _legacy(model_type: str, **config: Any) -> Any:
    cfg = AutoConfig.for_model(model_type, vocab_size=VOCAB, hidden_size=64, num_attention_heads=4,
                               initializer_range=0.2, **config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(cfg).eval()


# GPT-Neo's local layers (window 8 over a 200-token prompt) gave other tokens than plain greedy
# decoding under a tree's 4D mask; Falcon with ALiBi raised.
@pytest.mark.parametrize(("model_type", "config", "reason"), [
    ("gpt_neo", {"num_layers": 2, "attention_types": [[["global", "local"], 1]], "window_size": 8},
     "local attention"),
    ("falcon", {"num_hidden_layers": 2, "alibi": True}, "ALiBi"),
])
def test_trees_are_off_for_local_attention_and_alibi(model_type: str, config: dict[str, Any],
                                                     reason: str) -> None:
    model = _legacy(model_type, **config)
    tok = byte_tokenizer()
    pc = percache.enable(model, tok, draft_verify_cost=FREE, draft_tree=True)
    plain, _ = baseline(model, pc.prompt(SEGMENTS).input_ids, max_new_tokens=N)
    near = [_wrong_every(plain, 3, 7), _wrong_every(plain, 4, 11)]
    hints = DraftHints(texts={"qa_bank": [tok.decode(n) for n in near]},
                       token_ids={"session": [_wrong_every(plain, 5, 13)]})
    gen = pc.generate(SEGMENTS, max_new_tokens=N, drafts=hints)
    assert gen.token_ids == plain and gen.stats.draft_tree_forwards == 0
    assert reason in tree_model_reason(model)
    pc.close()


def test_trees_are_off_for_sliding_windows_and_extra_masks() -> None:
    llama, _ = tiny_pair("llama")
    mistral, _ = tiny_pair("mistral")
    assert tree_usable(llama, None)
    assert not tree_usable(llama, lambda b, h, q, kv: kv >= 0)  # a plugin's extra mask
    assert tree_model_reason(mistral) == "sliding-window attention" and not tree_usable(mistral, None)
