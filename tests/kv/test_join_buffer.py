"""Join buffers: memory is lent again only when nothing else references it."""

from __future__ import annotations

import pytest
import torch

from percache_plugin.kv import join_buffer
from percache_plugin.kv.join_buffer import JoinBuffers, storage_use_count

CPU = torch.device("cpu")
SHAPE = (1, 2, 8, 4)


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_memory_nobody_references_is_lent_again() -> None:
    bufs = JoinBuffers()
    first = bufs.take(0, SHAPE, torch.float32, CPU)
    ptr = first.untyped_storage().data_ptr()
    del first
    again = bufs.take(0, SHAPE, torch.float32, CPU)
    assert again.shape == SHAPE and again.is_contiguous()
    assert again.untyped_storage().data_ptr() == ptr
    assert (bufs.stats.reuses, bufs.stats.allocations, bufs.stats.busy) == (1, 1, 0)
    assert bufs.nbytes == int(8 * 8 * 1.125) * 4  # one prefix plus the headroom


@pytest.mark.parametrize("holder", ["tensor", "view of a view", "numpy", "storage", "dlpack"])
def test_memory_still_referenced_is_never_lent(holder: str) -> None:
    bufs = JoinBuffers()
    first = bufs.take(0, SHAPE, torch.float32, CPU)
    first.fill_(7.0)
    kept: object = {
        "tensor": first,
        "view of a view": first[..., :3, :],  # what DynamicLayer.crop leaves
        "numpy": first.numpy(),
        "storage": first.untyped_storage(),
        "dlpack": torch.utils.dlpack.to_dlpack(first),
    }[holder]
    del first
    again = bufs.take(0, SHAPE, torch.float32, CPU)
    again.fill_(-1.0)
    assert bufs.stats.busy == 1 and bufs.stats.reuses == 0
    if holder in ("tensor", "view of a view"):
        assert isinstance(kept, torch.Tensor) and not same_memory(kept, again)
        assert bool((kept == 7.0).all())
    elif holder == "numpy":
        assert (kept == 7.0).all()  # type: ignore[operator]
    ptr = again.untyped_storage().data_ptr()
    del kept, again  # once both are let go, the new memory is the one lent
    assert bufs.take(0, SHAPE, torch.float32, CPU).untyped_storage().data_ptr() == ptr
    assert (bufs.stats.reuses, bufs.stats.allocations) == (1, 2)


def test_the_new_memory_is_lent_once_the_old_user_is_gone() -> None:
    bufs = JoinBuffers()
    kept = bufs.take(0, SHAPE, torch.float32, CPU)
    second = bufs.take(0, SHAPE, torch.float32, CPU)  # busy: new memory, held instead
    ptr = second.untyped_storage().data_ptr()
    del second
    third = bufs.take(0, SHAPE, torch.float32, CPU)
    assert third.untyped_storage().data_ptr() == ptr and not same_memory(kept, third)
    assert (bufs.stats.allocations, bufs.stats.busy, bufs.stats.reuses) == (2, 1, 1)


def test_longer_prefix_other_dtype_and_headroom() -> None:
    bufs = JoinBuffers(headroom=0.25)
    bufs.take(0, (1, 2, 8, 4), torch.float32, CPU)
    bufs.take(0, (1, 2, 10, 4), torch.float32, CPU)  # within the headroom: reused
    assert (bufs.stats.reuses, bufs.stats.allocations) == (1, 1)
    bufs.take(0, (1, 2, 11, 4), torch.float32, CPU)  # longer: new memory
    bufs.take(0, (1, 2, 11, 4), torch.bfloat16, CPU)  # other dtype: new memory
    assert (bufs.stats.reuses, bufs.stats.allocations) == (1, 3)
    bufs.clear()
    assert bufs.nbytes == 0
    with pytest.raises(ValueError, match="headroom"):
        JoinBuffers(headroom=-1)


def test_without_torchs_use_count_nothing_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(join_buffer, "_use_count_fn", lambda: None)
    bufs = JoinBuffers()
    assert not bufs.reuse_supported and storage_use_count(torch.zeros(1)) is None
    bufs.take(0, SHAPE, torch.float32, CPU)
    bufs.take(0, SHAPE, torch.float32, CPU)
    assert (bufs.stats.reuses, bufs.stats.allocations, bufs.nbytes) == (0, 2, 0)


def test_threads_taking_at_once_never_share_memory() -> None:
    import threading

    bufs = JoinBuffers()
    got: list[torch.Tensor] = []
    start = threading.Barrier(8)

    def take() -> None:
        start.wait()
        got.append(bufs.take(0, SHAPE, torch.float32, CPU))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ptrs = [t.untyped_storage().data_ptr() for t in got]
    assert len(set(ptrs)) == 8 and bufs.stats.reuses == 0


def test_memory_taken_in_inference_mode_is_writable_outside_it() -> None:
    bufs = JoinBuffers()
    with torch.inference_mode():
        bufs.take(0, SHAPE, torch.float32, CPU).fill_(1.0)
    again = bufs.take(0, SHAPE, torch.float32, CPU)  # no inference mode now
    again.fill_(2.0)  # an inference tensor would refuse this write
    assert bool((again == 2.0).all()) and not again.is_inference()
    del again
    with torch.inference_mode():
        bufs.take(0, SHAPE, torch.float32, CPU).fill_(3.0)  # and back
    assert bufs.stats.reuses == 2 and bufs.stats.allocations == 1
