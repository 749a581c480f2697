import zlib

import torch

from percache_plugin.kv.integrity import checksum_tensors


def test_checksum_is_zlib_crc32_over_the_bytes_in_order() -> None:
    # Stores written with zlib's crc32 must read with whichever CRC-32 is in use (ISA-L or zlib).
    tensors = [torch.arange(37, dtype=torch.float32), torch.randn(3, 5, 7).to(torch.bfloat16),
               torch.empty(0), torch.arange(1001, dtype=torch.int64)]
    crc = 0
    for t in tensors:
        crc = zlib.crc32(t.numpy().tobytes() if t.dtype != torch.bfloat16
                         else t.view(torch.int16).numpy().tobytes(), crc)
    assert checksum_tensors(tensors) == f"crc32:{crc:08x}"
