import pytest
import torch

from percache_plugin.buffer.offload import BufferedWeights, dispatch_buffered
from percache_plugin.buffer.trace import Tracer
from tests.models import tiny_model

accelerate = pytest.importorskip("accelerate")


def offloaded(tmp_path, capacity_share: float, policy: str, tracer: Tracer | None = None):
    from accelerate.utils import offload_state_dict

    model = tiny_model("llama", num_hidden_layers=4)
    ref = tiny_model("llama", num_hidden_layers=4)
    n = model.config.num_hidden_layers
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu",
                  "lm_head": "cpu", **{f"model.layers.{i}": "disk" for i in range(n)}}
    disk = {k: v for k, v in model.state_dict().items() if k.startswith("model.layers.")}
    offload_state_dict(str(tmp_path), disk)
    total = sum(v.numel() * v.element_size() for v in disk.values())
    weights = BufferedWeights(tmp_path, int(total * capacity_share), policy, tracer=tracer)
    dispatch_buffered(model, device_map, weights)
    return model, ref, weights, total


@pytest.mark.parametrize("policy", ["lru", "llm"])
def test_offloaded_model_matches_the_resident_one(tmp_path, policy: str) -> None:
    model, ref, weights, total = offloaded(tmp_path, 0.5, policy)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(model(ids).logits, ref(ids).logits)
    assert weights.cache.used <= weights.cache.capacity
    assert weights.bytes_read >= total  # the first forward reads everything once


def test_llm_policy_reads_less_than_lru_on_repeated_forwards(tmp_path) -> None:
    ids = torch.tensor([[1, 2, 3]])
    read = {}
    for policy in ("lru", "llm"):
        model, _, weights, total = offloaded(tmp_path / policy, 0.5, policy)
        with torch.no_grad():
            for _ in range(6):
                model(ids)
        read[policy] = weights.bytes_read
    assert read["lru"] >= 5 * total  # every forward misses everything (a loop larger than the cache)
    assert read["llm"] < 0.8 * read["lru"]


def test_weight_reads_are_traced(tmp_path) -> None:
    tracer = Tracer()
    model, _, weights, _ = offloaded(tmp_path, 0.25, "llm", tracer)
    with torch.no_grad():
        model(torch.tensor([[1, 2]]))
    assert len(tracer.accesses) == len(weights.index)
    assert all(a.file.endswith(".dat") for a in tracer.accesses)


def test_not_an_offload_folder(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="index.json"):
        BufferedWeights(tmp_path, 10)


def test_read_path_bandwidth_reads_every_file_as_a_miss_does(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from percache_plugin.buffer import offload

    paths = []
    for i, size in enumerate((1000, 5000, 1)):
        path = tmp_path / f"t{i}.dat"
        path.write_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
        paths.append(path)
    seen: list[int] = []
    real = offload.read_dropping_pages
    monkeypatch.setattr(offload, "read_dropping_pages", lambda p: seen.append(len(r := real(p))) or r)
    assert offload.read_path_bandwidth(paths) > 0
    assert seen == [1000, 5000, 1]
    with pytest.raises(ValueError, match="no files"):
        offload.read_path_bandwidth([])


def test_bench_offload_samples_the_miss_path_by_bytes(tmp_path) -> None:
    from percache_plugin.bench.offload import _sample

    paths = []
    for i, size in enumerate((10, 10, 10, 10)):
        (path := tmp_path / f"{i}.dat").write_bytes(bytes(size))
        paths.append(path)
    assert _sample(paths, 25) == paths[:3]
    assert _sample(paths, 0) == paths[:1]
    assert _sample(paths, 1000) == paths


def _layers_of(seed: int) -> dict[str, torch.Tensor]:
    model = tiny_model("llama", num_hidden_layers=4, seed=seed)
    return {k: v for k, v in model.state_dict().items() if k.startswith("model.layers.")}


def test_a_folder_rewritten_by_another_offload_is_read_again(tmp_path) -> None:
    # Plain accelerate reads the files at every forward: a second model offloaded into the same
    # folder is what the next forward computes with. The buffer must not keep serving the first.
    from accelerate.utils import offload_state_dict

    model, _, weights, _ = offloaded(tmp_path, 1.0, "lru")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    other = tiny_model("llama", num_hidden_layers=4)
    other.load_state_dict(_layers_of(seed=1), strict=False)
    with torch.no_grad():
        model(ids)  # every tensor cached
        offload_state_dict(str(tmp_path), _layers_of(seed=1))
        assert torch.equal(model(ids).logits, other(ids).logits)
    assert weights.stale == len(weights.index)



def test_a_file_rewritten_in_place_with_its_mtime_restored_is_read_again(tmp_path) -> None:
    import os

    _, _, weights, _ = offloaded(tmp_path, 1.0, "lru")
    key = next(iter(weights.index))
    path = tmp_path / f"{key}.dat"
    before = weights[key].clone()
    st = path.stat()
    with open(path, "r+b") as f:  # same size, same inode, other bytes
        f.write(bytes(len(path.read_bytes())))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns
    assert not torch.equal(before, weights[key])
    assert torch.count_nonzero(weights[key]) == 0 and weights.stale == 1


def test_every_dtype_accelerate_offloads_is_served_as_accelerate_loads_it(tmp_path) -> None:
    from accelerate.utils import offload_state_dict
    from accelerate.utils.offload import OffloadedWeightsLoader

    base = torch.linspace(-3, 3, 24).reshape(4, 6)
    state = {str(dtype).removeprefix("torch."): base.to(dtype)
             for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int16,
                           torch.int64, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}
    state["scalar"] = torch.tensor(2.5)
    offload_state_dict(str(tmp_path), state)
    weights, plain = BufferedWeights(tmp_path, 1 << 20, "lru"), OffloadedWeightsLoader(save_folder=str(tmp_path))
    for key in state:
        got, want = weights[key], plain[key]
        assert (got.dtype, got.shape) == (want.dtype, want.shape), key
        assert torch.equal(got.view(torch.uint8) if got.dim() else got, want.view(torch.uint8) if want.dim() else want), key
