"""Plain prompts reuse the longest cached block prefix of any earlier prompt, exactly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.kv.blocks import block_prompt
from percache_plugin.segments import SegmentError
from tests.helpers import baseline, tiny_pair

FEW_SHOT = "".join(f"Q: what is {i} plus {i}? A: {2 * i}.\n" for i in range(12))
GEN = {"max_new_tokens": 6, "do_sample": False}


def test_block_prompt_keeps_a_tail_and_chains_keys() -> None:
    p = block_prompt(list(range(10, 74)), 16, "fp")
    assert [x.n_tokens for x in p.pieces] == [16, 16, 16, 16]  # the last block is the tail
    assert p.pieces[-1].key is None and all(x.key for x in p.pieces[:-1])
    q = block_prompt(list(range(10, 50)) + [7] * 30, 16, "fp")
    assert [x.key for x in q.pieces[:2]] == [x.key for x in p.pieces[:2]]
    assert q.pieces[2].key != p.pieces[2].key  # ids differ inside block 3: so does every later key
    with pytest.raises(SegmentError, match="empty"):
        block_prompt([], 16, "fp")


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2"])
def test_few_shot_preamble_and_growing_transcript_are_reused_exactly(family: str, tmp_path: Path) -> None:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=16)
    first = pc.complete(FEW_SHOT + "Q: what is 20 plus 20? A:", **GEN)
    second = pc.complete(FEW_SHOT + "Q: what is 31 plus 31? A:", **GEN)
    shared = len(tok(FEW_SHOT)["input_ids"])
    assert first.stats.tokens_reused == 0
    assert shared - 16 < second.stats.tokens_reused <= shared
    transcript = FEW_SHOT
    for i in range(3):  # a growing transcript: each prompt extends the previous one
        transcript += f"Q: and {i} times two? A: {2 * i}.\n"
        grown = pc.complete(transcript, **GEN)
        assert grown.stats.tokens_reused >= len(tok(transcript)["input_ids"]) - 40
    with pc.disabled():
        for g in (first, second, grown):
            want, logits = baseline(model, g.prompt_ids, 6)
            assert g.token_ids == want
            assert (g.first_logits - logits).abs().max().item() <= 1e-4
    ids = pc.complete(list(second.prompt_ids), **GEN)  # token ids work too; now every full block is stored
    assert ids.token_ids == second.token_ids
    assert ids.stats.tokens_reused == (len(second.prompt_ids) - 1) // 16 * 16
    with pytest.raises(TypeError, match="token ids"):
        pc.complete([1.5])  # type: ignore[list-item]


CHILD = textwrap.dedent("""
    import sys
    import percache_plugin as percache
    from tests.helpers import tiny_pair
    model, tok = tiny_pair("llama", hidden_size=256, intermediate_size=512)
    pc = percache.enable(model, tok, store=sys.argv[1], prefix_block_tokens=8)
    print("ready", flush=True)
    i = 0
    while True:
        pc.complete("".join(f"line {i} {j}\\n" for j in range(60)), max_new_tokens=1)
        i += 1
""")


def test_kill_9_during_block_writes_leaves_no_partial_block(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(store)], env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(3.0)
    proc.kill()
    proc.wait()
    model, tok = tiny_pair("llama", hidden_size=256, intermediate_size=512)
    pc = percache.enable(model, tok, store=store, prefix_block_tokens=8)
    nodes = pc.store.nodes()
    assert nodes, "the child stored nothing before it was killed"
    for node in nodes:  # every block the store lists loads whole
        assert pc.store.get(node.key) is not None
    leftovers = [p for p in store.rglob("*") if p.is_file() and ".tmp" in p.name]
    assert not leftovers
    g = pc.complete("".join(f"line 0 {j}\n" for j in range(60)), max_new_tokens=3)
    with pc.disabled():
        assert g.token_ids == baseline(model, g.prompt_ids, 3)[0]


def test_a_users_own_generate_call_served_through_past_key_values(tmp_path: Path) -> None:
    """The README recipe: prefill the block prompt, hand its cache to model.generate."""
    import torch

    model, tok = tiny_pair("qwen2")
    pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=16)
    pc.complete(FEW_SHOT + "Q: what is 5 plus 5? A:", max_new_tokens=1)
    ids = tok(FEW_SHOT + "Q: what is 7 plus 7? A:")["input_ids"]
    pre = pc.prefill(block_prompt(ids, pc.config.prefix_block_tokens, pc.fingerprint))
    assert pre.stats.tokens_reused > 0 and pre.cache.get_seq_length() == len(ids) - 1
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), past_key_values=pre.cache,
                         max_new_tokens=6, do_sample=False, pad_token_id=0)
    with pc.disabled():
        assert out[0, len(ids):].tolist() == baseline(model, ids, 6)[0]
