"""pc.memory.update drops the old text's K/V under every model fingerprint, as forget does."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

import percache_plugin as percache
from percache_plugin.kv.chunk_nodes import chunk_node_keys
from tests.helpers import tiny_pair

OLD = "Zorblax keeps the spare key under the blue flowerpot"
NEW = "Zorblax keeps the spare key in the mailbox"


def files_holding_bytes(root: Path, needles: list[bytes]) -> list[str]:
    """The files under ``root`` holding one of ``needles`` byte for byte (tensor bytes)."""
    return [f"{path.relative_to(root)}: {i}" for path in sorted(root.rglob("*")) if path.is_file()
            for i, n in enumerate(needles) if n in path.read_bytes()]


def test_update_drops_the_old_texts_kv_stored_under_another_fingerprint(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    config = dict(store=tmp_path, embedder="hash", predict="off", answer_grounding=False,
                  relevance_threshold=None, memory_threshold=0.0, use_qa_bank=False)
    pc = percache.enable(model, tok, **config)
    fact = pc.memory.add(OLD, scope="me").fact
    assert fact.id in pc.ask("Where is the spare key?", scope="me", max_new_tokens=2).sources
    keys = chunk_node_keys(pc.store, {fact.id})
    assert keys, "the test needs the old text's K/V in the store"
    kv = [pc.store.get(k).keys[0].contiguous().numpy().tobytes() for k in keys]  # type: ignore[union-attr]
    assert files_holding_bytes(tmp_path, kv), "the test must see the old text's K/V in the files"
    pc.close()
    other = copy.deepcopy(model)  # e.g. a persona's adapter: another fingerprint, the same store
    with torch.no_grad():
        next(other.parameters()).add_(0.01)
    pc = percache.enable(other, tok, **config)
    pc.memory.update(fact.id, NEW)
    pc.close()
    assert files_holding_bytes(tmp_path, kv) == []
    pc = percache.enable(model, tok, **config)
    assert not chunk_node_keys(pc.store, {fact.id}) & keys
    pc.close()
