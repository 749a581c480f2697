"""A sampling seed that touches no state outside its request.

``torch.manual_seed`` seeds the process-wide generators: a seeded request then changed the
random numbers of every later unseeded one, and another thread's seed in between changed its
own. transformers' ``generate`` samples from those generators (it takes none of its own), so a
seeded request forks them: it seeds a copy, and the state they had comes back when it ends.
The caller holds the model's lock (``Engine.generate``), so no other request samples meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["seeded"]


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Sample with the generators seeded by ``seed`` inside the block, and restore their states
    after it (CPU, and every CUDA device when CUDA is in use); ``None`` leaves them alone."""
    if seed is None:
        yield
        return
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []):
        torch.random.default_generator.manual_seed(seed)
        if cuda:  # not before CUDA is initialized: a seed queued for then would outlive the block
            torch.cuda.manual_seed_all(seed)
        yield
