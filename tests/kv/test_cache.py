import torch

from percache_plugin.kv.cache import AdoptingLayer, cache_from_chunks, layer_kv
from percache_plugin.kv.chunk import ChunkKV


def chunk(value: float, n: int, layers: int = 2) -> ChunkKV:
    return ChunkKV(tuple(torch.full((2, n, 4), value) for _ in range(layers)),
                   tuple(torch.full((2, n, 4), -value) for _ in range(layers)))


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_chunks_are_copied_once_into_the_cache() -> None:
    chunks = [chunk(1.0, 3), chunk(2.0, 5)]
    cache = cache_from_chunks(chunks, torch.float32, torch.device("cpu"))
    assert cache.get_seq_length() == 8
    for i in range(2):
        keys, values = layer_kv(cache, i)
        assert keys.shape == (1, 2, 8, 4)
        assert torch.equal(keys[0], torch.cat([c.keys[i] for c in chunks], dim=1))
        assert torch.equal(values[0], torch.cat([c.values[i] for c in chunks], dim=1))
        assert not any(shares_memory(keys, c.keys[i]) for c in chunks)


def test_one_chunk_is_copied_too() -> None:
    c = chunk(1.0, 4)
    cache = cache_from_chunks([c], torch.float32, torch.device("cpu"))
    keys, _ = layer_kv(cache, 0)
    keys.add_(1.0)  # generate may write into its cache: the chunk stays as it was
    assert float(c.keys[0][0, 0, 0]) == 1.0


def test_adopting_layer_keeps_the_first_tensors_then_appends() -> None:
    layer = AdoptingLayer()
    k, v = torch.zeros(1, 2, 3, 4), torch.ones(1, 2, 3, 4)
    keys, values = layer.update(k, v)
    assert keys is k and values is v  # no second copy
    more_k, more_v = layer.update(torch.full((1, 2, 1, 4), 5.0), torch.full((1, 2, 1, 4), 6.0))
    assert more_k.shape[-2] == 4 and float(more_k[0, 0, -1, 0]) == 5.0 and float(k[0, 0, -1, 0]) == 0.0
    layer.crop(-1)
    assert layer.get_seq_length() == 3
