import pytest
import torch
from transformers import DynamicCache

from percache_plugin.kv.cache import DeferredLayer, cache_from_chunks, layer_kv, slice_chunk
from percache_plugin.kv.chunk import ChunkKV
from tests.models import tiny_model


def chunk(value: float, n: int, layers: int = 2) -> ChunkKV:
    return ChunkKV(tuple(torch.full((2, n, 4), value) for _ in range(layers)),
                   tuple(torch.full((2, n, 4), -value) for _ in range(layers)))


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_chunks_read_back_concatenated_never_shared() -> None:
    chunks = [chunk(1.0, 3), chunk(2.0, 5)]
    cache = cache_from_chunks(chunks, torch.float32, torch.device("cpu"))
    assert cache.get_seq_length() == 8  # known before anything is concatenated
    assert all(isinstance(layer, DeferredLayer) and layer.deferred for layer in cache.layers)
    for i in range(2):
        keys, values = layer_kv(cache, i)  # reading them concatenates the parts alone
        assert keys.shape == (1, 2, 8, 4)
        assert torch.equal(keys[0], torch.cat([c.keys[i] for c in chunks], dim=1))
        assert torch.equal(values[0], torch.cat([c.values[i] for c in chunks], dim=1))
        assert not any(shares_memory(keys, c.keys[i]) for c in chunks)


def test_one_chunk_is_never_written_through_the_cache() -> None:
    c = chunk(1.0, 4)
    cache = cache_from_chunks([c], torch.float32, torch.device("cpu"))
    keys, _ = layer_kv(cache, 0)
    keys.add_(1.0)  # generate may write into its cache: the chunk stays as it was
    assert float(c.keys[0][0, 0, 0]) == 1.0


def test_first_update_concatenates_parts_and_new_states_in_one_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    joins: list[bool] = []
    join = DeferredLayer._join
    monkeypatch.setattr(DeferredLayer, "_join", lambda self, extra=None: joins.append(extra is not None) or join(self, extra))
    a, b = chunk(1.0, 3, layers=1), chunk(2.0, 2, layers=1)
    layer = cache_from_chunks([a, b], torch.float32, torch.device("cpu")).layers[0]
    new_k, new_v = torch.full((1, 2, 1, 4), 5.0), torch.full((1, 2, 1, 4), 6.0)
    keys, values = layer.update(new_k, new_v)
    assert joins == [True] and not layer.deferred
    assert keys.shape[-2] == 6 and float(keys[0, 0, -1, 0]) == 5.0 and float(values[0, 0, 0, 0]) == -1.0
    more, _ = layer.update(new_k, new_v)  # then as a DynamicLayer
    assert more.shape[-2] == 7 and layer.get_seq_length() == 7 and joins == [True]
    layer.crop(-2)
    assert layer.get_seq_length() == 5
    assert float(a.keys[0][0, 0, 0]) == 1.0 and a.keys[0].shape == (2, 3, 4)


def test_crop_and_reset_before_the_first_update() -> None:
    layer = cache_from_chunks([chunk(1.0, 3), chunk(2.0, 2)], torch.float32, torch.device("cpu")).layers[0]
    layer.crop(-1)
    assert layer.get_seq_length() == 4 and float(layer.keys[0, 0, -1, 0]) == 2.0
    other = cache_from_chunks([chunk(1.0, 3)], torch.float32, torch.device("cpu")).layers[0]
    other.reset()
    assert other.get_seq_length() == 0 and not other.is_initialized


def test_other_dtypes_are_converted() -> None:
    c = ChunkKV((torch.ones(2, 3, 4, dtype=torch.bfloat16),), (torch.zeros(2, 3, 4, dtype=torch.bfloat16),))
    keys, _ = layer_kv(cache_from_chunks([c], torch.float32, torch.device("cpu")), 0)
    assert keys.dtype == torch.float32


def test_a_model_over_a_deferred_cache_matches_one_over_a_built_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("llama")
    ids = torch.randint(3, 200, (1, 14), generator=torch.Generator().manual_seed(0))
    full = DynamicCache()
    with torch.no_grad():
        model(ids[:, :12], past_key_values=full, use_cache=True)
    parts = [slice_chunk(full, 0, 5), slice_chunk(full, 5, 12)]
    reference = DynamicCache()
    with torch.no_grad():
        model(ids[:, :12], past_key_values=reference, use_cache=True)
        want = model(ids[:, 12:], past_key_values=reference, use_cache=True).logits
    joins: list[bool] = []
    join = DeferredLayer._join
    monkeypatch.setattr(DeferredLayer, "_join", lambda self, extra=None: joins.append(extra is not None) or join(self, extra))
    cache = cache_from_chunks(parts, torch.float32, torch.device("cpu"))
    with torch.no_grad():
        got = model(ids[:, 12:], past_key_values=cache, use_cache=True).logits
    assert torch.equal(got, want)
    assert joins == [True] * len(cache.layers)  # each layer joined once, in its first update
    assert cache.get_seq_length() == 14


def test_wait_layers_waits_for_pending_chunks_without_joining() -> None:
    from percache_plugin.kv.cache import wait_layers
    from percache_plugin.kv.layer_read import CorruptLayerError, LayerGate

    def pending(gate: LayerGate) -> ChunkKV:
        return ChunkKV(tuple(torch.zeros(2, 3, 4) for _ in range(2)),
                       tuple(torch.zeros(2, 3, 4) for _ in range(2)), pending=gate)

    good = LayerGate("good", 2)
    good._advance()
    good._advance()
    cache = cache_from_chunks([pending(good)], torch.float32, torch.device("cpu"))
    wait_layers(cache)
    assert all(layer.deferred for layer in cache.layers)  # checked, still one copy to come

    bad = LayerGate("bad", 2)
    bad._advance()
    bad._fail("checksum mismatch")
    cache = cache_from_chunks([pending(good), pending(bad)], torch.float32, torch.device("cpu"))
    with pytest.raises(CorruptLayerError, match="layer 1"):
        wait_layers(cache)


def test_the_first_update_joins_into_lent_memory_and_a_kept_cache_keeps_its_own() -> None:
    from percache_plugin.kv.join_buffer import JoinBuffers

    bufs = JoinBuffers()
    a, b = chunk(1.0, 3), chunk(2.0, 2)
    new_k, new_v = torch.full((1, 2, 1, 4), 5.0), torch.full((1, 2, 1, 4), 6.0)
    kept = cache_from_chunks([a, b], torch.float32, torch.device("cpu"), buffers=bufs)
    k1, v1 = kept.layers[0].update(new_k, new_v)
    assert torch.equal(k1[0], torch.cat([a.keys[0], b.keys[0], new_k[0]], dim=1))
    assert torch.equal(v1[0], torch.cat([a.values[0], b.values[0], new_v[0]], dim=1))
    held = bufs._held[(0, "k")].flat
    assert shares_memory(k1, held)  # written into the lent memory, the one copy
    assert not any(shares_memory(k1, c.keys[0]) for c in (a, b))
    other = cache_from_chunks([b, a], torch.float32, torch.device("cpu"), buffers=bufs)
    k2, _ = other.layers[0].update(-new_k, -new_v)  # `kept` is alive: new memory
    assert not shares_memory(k1, k2) and bufs.stats.busy == 2  # keys and values
    assert torch.equal(k1[0], torch.cat([a.keys[0], b.keys[0], new_k[0]], dim=1))  # untouched
    assert float(a.keys[0][0, 0, 0]) == 1.0 and float(b.keys[0][0, 0, 0]) == 2.0
    del kept, k1, v1, held
    third = cache_from_chunks([a, b], torch.float32, torch.device("cpu"), buffers=bufs)
    third.layers[0].update(new_k, new_v)  # `other` is alive: new memory again
    assert bufs.stats.busy == 4
    ptr = third.layers[0].keys.untyped_storage().data_ptr()
    del other, k2, third
    last = cache_from_chunks([a, b], torch.float32, torch.device("cpu"), buffers=bufs)
    keys, _ = last.layers[0].update(new_k, new_v)  # nothing references the last memory
    assert keys.untyped_storage().data_ptr() == ptr and bufs.stats.reuses >= 1
    assert torch.equal(keys[0], torch.cat([a.keys[0], b.keys[0], new_k[0]], dim=1))


def test_a_join_under_autograd_or_after_inference_mode_matches_a_plain_join() -> None:
    """``torch.cat(out=...)`` refuses inputs that require grad, and memory taken in inference
    mode cannot be written outside it: a forward with autograd on, or under ``no_grad`` after
    percache's own inference-mode forwards, must still join (a caller's teacher-forced check
    over a ``Prefilled``)."""
    from percache_plugin.kv.join_buffer import JoinBuffers

    bufs = JoinBuffers()
    a, b = chunk(1.0, 3), chunk(2.0, 2)
    cpu = torch.device("cpu")
    with torch.inference_mode():  # how percache's requests run: the memory is taken here
        cache_from_chunks([a, b], torch.float32, cpu, buffers=bufs).layers[0].update(
            torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
    new_k = torch.full((1, 2, 1, 4), 5.0, requires_grad=True)
    new_v = torch.full((1, 2, 1, 4), 6.0)
    keys, values = cache_from_chunks([a, b], torch.float32, cpu, buffers=bufs).layers[0].update(new_k, new_v)
    assert keys.requires_grad and torch.equal(keys[0].detach(), torch.cat([a.keys[0], b.keys[0], new_k[0].detach()], dim=1))
    keys.sum().backward()
    assert new_k.grad is not None and bool((new_k.grad == 1).all())
    with torch.no_grad():
        keys, values = cache_from_chunks([a, b], torch.float32, cpu, buffers=bufs).layers[0].update(new_k, new_v)
    assert torch.equal(values[0], torch.cat([a.values[0], b.values[0], new_v[0]], dim=1))
    assert not keys.is_inference()
