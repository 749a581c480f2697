"""Exact reuse is token-for-token identical to plain generate, on every tiny family."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import percache_plugin as percache
from tests.helpers import SEGMENTS, baseline, tiny_pair
from tests.models import TINY_FAMILIES

GEN = {"max_new_tokens": 8, "do_sample": False}


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_cold_warm_partial_equal_plain_generate(family: str, tmp_path: Path) -> None:
    model, tok = tiny_pair(family)
    original = model.config._attn_implementation
    pc = percache.enable(model, tok, store=tmp_path / "store")
    ids = pc.prompt(SEGMENTS).input_ids
    with pc.disabled():
        assert model.config._attn_implementation == original
        want, want_logits = baseline(model, ids)

    cold = pc.generate(SEGMENTS, **GEN)
    warm = pc.generate(SEGMENTS, **GEN)
    for g in (cold, warm):
        assert g.token_ids == want
        assert g.prompt_ids == ids
        assert (g.first_logits - want_logits).abs().max().item() <= 1e-4
    assert cold.stats.tokens_reused == 0 and cold.stats.nodes_stored == 4
    assert warm.stats.tokens_reused == pc.prompt(SEGMENTS[:-1] + ["x"]).pieces[-1].start
    assert warm.stats.tokens_reused > 0 and warm.stats.nodes_stored == 0

    # Partial hit: system + first chunk cached, a new chunk after them is computed and stored.
    other = SEGMENTS[:2] + ["New chat: Dana joins at 7pm."] + SEGMENTS[-1:]
    part = pc.generate(other, **GEN)
    want_other, _ = baseline(model, pc.prompt(other).input_ids)
    assert part.token_ids == want_other
    assert part.stats.nodes_reused == 2 and part.stats.nodes_stored == 1
    again = pc.generate(other, **GEN)
    assert again.stats.nodes_reused == 3 and again.token_ids == want_other
    pc.disable()
    assert model.config._attn_implementation == original


def test_disable_restores_bit_identical_outputs() -> None:
    model, tok = tiny_pair("llama")
    x = torch.tensor([list(range(5, 40))])
    with torch.inference_mode():
        before = model(x).logits
        pc = percache.enable(model, tok)
        during = model(x).logits
        pc.disable()
        after = model(x).logits
    assert torch.equal(before, after)
    assert (before - during).abs().max().item() < 1e-5


def test_hook_fires_once_per_layer_per_forward() -> None:
    model, tok = tiny_pair("qwen2")
    pc = percache.enable(model, tok)
    calls: list[int] = []

    class Count:
        @percache.hookimpl(wrapper=True)
        def percache_attention(self, ctx, module, query, key, value, attention_mask, kwargs):
            calls.append(module.layer_idx)
            return (yield)

    pc.plugins.register(Count())
    with torch.inference_mode():
        model(torch.tensor([[5, 6, 7, 8]]))
    assert calls == list(range(model.config.num_hidden_layers))


def test_fully_cached_prompt_keeps_one_token_uncached() -> None:
    model, tok = tiny_pair("llama", chat_template=False)
    pc = percache.enable(model, tok)
    segs = [percache.Segment("System text.", "system"), percache.Segment("Chunk text.", "chunk"),
            percache.Segment("Q", "query")]
    pc.generate(segs, **GEN)
    # Same reusable prefix, and a query made of a single token: everything but it is cached.
    g = pc.generate(segs, **GEN)
    want, _ = baseline(model, g.prompt_ids)
    assert g.token_ids == want
    assert g.stats.tokens_computed == 1


def test_corrupted_tensor_breaks_equivalence_unless_verified(tmp_path: Path) -> None:
    """Negative control: the equivalence test above can fail."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, verify_checksums=False)
    want = pc.generate(SEGMENTS, **GEN)
    key = pc.prompt(SEGMENTS).pieces[1].key
    path = next((tmp_path / "kv").rglob(f"{key}.safetensors"))
    data = bytearray(path.read_bytes())
    # Overwrite the tail of the file (tensor bytes) with large floats.
    data[-4096:] = torch.full((1024,), 1e4).numpy().tobytes()
    path.write_bytes(bytes(data))
    bad = pc.generate(SEGMENTS, **GEN)
    assert bad.stats.tokens_reused > 0
    assert (bad.first_logits - want.first_logits).abs().max().item() > 1e-3
    pc.disable()

    # The same corruption, with verification on: a miss, and the answer is right again.
    pc2 = percache.enable(model, tok, store=tmp_path)
    good = pc2.generate(SEGMENTS, **GEN)
    assert pc2.store.stats().corrupt == 1
    assert good.token_ids == want.token_ids
    assert good.stats.nodes_reused == 1  # only the node before the corrupted one
    pc2.disable()


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import percache_plugin as percache
from tests.helpers import SEGMENTS, tiny_pair
out = {{}}
for family in {families!r}:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, store={store!r} + "/" + family)
    g = pc.generate(SEGMENTS, max_new_tokens=8, do_sample=False)
    out[family] = [g.token_ids, g.stats.tokens_reused]
    pc.disable()
print(json.dumps(out))
"""


def test_fresh_process_reuses_store(tmp_path: Path) -> None:
    families = list(TINY_FAMILIES)
    want = {}
    for family in families:
        model, tok = tiny_pair(family)
        pc = percache.enable(model, tok, store=tmp_path / family)
        want[family] = pc.generate(SEGMENTS, **GEN).token_ids
        pc.disable()
    root = str(Path(__file__).resolve().parent.parent)
    code = _CHILD.format(root=root, families=families, store=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for family in families:
        tokens, reused = got[family]
        assert tokens == want[family], family
        assert reused > 0, family


def test_debug_log_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, debug_log=True)
    with caplog.at_level("INFO", logger="percache"):
        pc.generate(SEGMENTS, **GEN)
        pc.generate(SEGMENTS, **GEN)
    lines = [r.getMessage() for r in caplog.records if r.name == "percache"]
    assert len(lines) == 2
    assert "reused=0 " in lines[0] and "reused=0 " not in lines[1]
    totals = pc.stats()
    assert totals.requests == 2 and totals.tokens_reused > 0 and 0 < totals.reuse_ratio < 1
