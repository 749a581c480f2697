import os
import time
import zlib
from pathlib import Path

import pytest
import torch

from percache_plugin.kv.integrity import checksum_tensors, prefetch_file


def test_checksum_is_zlib_crc32_over_the_bytes_in_order() -> None:
    # Stores written with zlib's crc32 must read with whichever CRC-32 is in use (ISA-L or zlib).
    tensors = [torch.arange(37, dtype=torch.float32), torch.randn(3, 5, 7).to(torch.bfloat16),
               torch.empty(0), torch.arange(1001, dtype=torch.int64)]
    crc = 0
    for t in tensors:
        crc = zlib.crc32(t.numpy().tobytes() if t.dtype != torch.bfloat16
                         else t.view(torch.int16).numpy().tobytes(), crc)
    assert checksum_tensors(tensors) == f"crc32:{crc:08x}"


def _cached(path: Path) -> bool:
    """Whether the file's first page is in the page cache (a read that must not wait for I/O)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT") or not hasattr(os, "posix_fadvise"),
                    reason="needs preadv(RWF_NOWAIT) and posix_fadvise")
def test_prefetch_reads_a_dropped_file_into_the_page_cache(tmp_path: Path) -> None:
    path = tmp_path / "node.safetensors"
    path.write_bytes(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    if _cached(path):
        pytest.skip("this filesystem keeps the file in memory (tmpfs?)")
    assert prefetch_file(path)
    deadline = time.monotonic() + 10
    while not _cached(path):
        assert time.monotonic() < deadline, "prefetched file never reached the page cache"
        time.sleep(0.01)


def test_prefetch_of_a_missing_file_is_a_no_op(tmp_path: Path) -> None:
    assert prefetch_file(tmp_path / "gone.safetensors") is False
