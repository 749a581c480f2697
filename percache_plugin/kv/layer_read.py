"""Read a request's node files layer by layer in a background thread, so that the forward over
layer ``i`` runs while layer ``i + 1`` is read.

:func:`open_layered` reads a node file's header (small: one ``pread``), checks it against what
the store recorded and returns the node's tensors as views into one freshly allocated buffer
that holds nothing yet, with a :class:`LayerGate`. :class:`LayerReader` (one per file store, one
thread that lives while it has work) then fills the buffers: for the lowest layer any queued node
still lacks, it reads that layer's key and value bytes with ``preadv`` (the GIL released during
the read), checks the layer's CRC-32 (the ``crc32l:`` checksums, :mod:`.checksums`) and opens
the gate for that layer. Layer-major order across the nodes of a request: the forward needs
layer 0 of every chunk before layer 1 of any.

:meth:`LayerGate.wait` blocks until a layer is read and checked. A layer whose read or CRC
failed makes every wait for it, or any later layer of that node, raise
:class:`CorruptLayerError`, after calling the gate's ``on_corrupt`` once (the store drops the
node): the forward that met it is aborted and produces nothing; the engine computes the request
again without the node. Nothing is served before its CRC is checked, and the bytes are the same
as the whole-file reader's, so the cache is bit-identical to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checksums import crc_update
from .node_read import RawNode, header_of, tensors_of

__all__ = ["CorruptLayerError", "LayerGate", "LayerReader", "LayeredNode", "open_layered"]

log = logging.getLogger("percache_plugin.kv.store")


class CorruptLayerError(Exception):
    """A layer of a node read in the background failed its read or its CRC after the request
    started using the node: the forward that waited for it is aborted (nothing is produced)."""

    def __init__(self, key: str, layer: int, reason: str) -> None:
        super().__init__(f"K/V node {key} layer {layer}: {reason}")
        self.key, self.layer, self.reason = key, layer, reason


class LayerGate:
    """How far a node's background read got: layers ``< ready`` are read and checked."""

    def __init__(self, key: str, n_layers: int, on_corrupt: Callable[[str], None] | None = None) -> None:
        self.key = key
        self.n_layers = n_layers
        self.ready = 0
        self.failed: tuple[int, str] | None = None
        self._on_corrupt = on_corrupt
        self._reported = False
        self._cond = threading.Condition()

    @property
    def finished(self) -> bool:
        """Every layer read and checked, or the read failed."""
        with self._cond:
            return self.failed is not None or self.ready >= self.n_layers

    @property
    def ok(self) -> bool:
        """Every layer read and checked."""
        with self._cond:
            return self.failed is None and self.ready >= self.n_layers

    def wait(self, layer: int) -> None:
        """Block until ``layer`` is read and checked.

        :raises CorruptLayerError: its read or check (or an earlier layer's) failed."""
        with self._cond:
            while self.ready <= layer and self.failed is None:
                self._cond.wait()
            if self.ready > layer:
                return
            assert self.failed is not None
            failed_at, reason = self.failed
            report, self._reported = not self._reported, True
        if report and self._on_corrupt is not None:
            self._on_corrupt(f"layer {failed_at}: {reason}")
        raise CorruptLayerError(self.key, failed_at, reason)

    def wait_all(self) -> None:
        self.wait(self.n_layers - 1)

    def _advance(self) -> None:
        with self._cond:
            self.ready += 1
            self._cond.notify_all()

    def _fail(self, reason: str) -> None:
        with self._cond:
            if self.failed is None:
                self.failed = (self.ready, reason)
            self._cond.notify_all()


@dataclass
class LayeredNode:
    """A node being read: its tensors (views, filled layer by layer) and what fills them."""

    tensors: dict[str, torch.Tensor]
    gate: LayerGate
    fd: int
    data: torch.Tensor
    start: int
    spans: list[list[tuple[int, int]]]  # per layer: (offset, length) of k.i and v.i in data
    crcs: list[int] | None
    next_layer: int = field(default=0)


def open_layered(path: Path, layout: Sequence[tuple[str, str, tuple[int, ...]]], key: str,
                 expected_metadata: Mapping[str, str], crcs: list[int] | None,
                 on_corrupt: Callable[[str], None] | None = None) -> LayeredNode:
    """Open a node file for :class:`LayerReader`: its header read and checked (names, dtypes,
    shapes, bounds, metadata), its tensors as views into an empty buffer.

    :raises FileNotFoundError: the file is missing.
    :raises ValueError: anything in the header does not match, with the reason."""
    fd = os.open(path, os.O_RDONLY)
    try:
        header, start = header_of(fd)
        data = torch.empty(os.fstat(fd).st_size - start, dtype=torch.uint8)
        metadata, tensors = tensors_of(RawNode(header, data), layout)
        for name, want in expected_metadata.items():
            if metadata.get(name) != want:
                raise ValueError(f"metadata {name!r} is {metadata.get(name)!r}, expected {want!r}")
        n = sum(1 for name, _, _ in layout if name.startswith("k."))
        base = data.data_ptr()
        spans = [[(tensors[f"{kind}.{i}"].data_ptr() - base, tensors[f"{kind}.{i}"].nbytes)
                  for kind in ("k", "v")] for i in range(n)]
    except BaseException:
        os.close(fd)
        raise
    return LayeredNode(tensors, LayerGate(key, n, on_corrupt), fd, data, start, spans, crcs)


class LayerReader:
    """Fills :class:`LayeredNode` s in one background thread, the lowest missing layer first;
    the thread starts with the first node queued and ends when none is left (or at
    :meth:`close`, which fails what is still queued)."""

    def __init__(self) -> None:
        self._queue: list[LayeredNode] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, node: LayeredNode) -> None:
        with self._cond:
            closed = self._closed
            if not closed:
                self._queue.append(node)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="percache-layer-reader",
                                                    daemon=True)
                    self._thread.start()
        if closed:
            self._drop(node, "the store was closed")

    @property
    def alive(self) -> bool:
        with self._cond:
            return self._thread is not None

    def _next(self) -> LayeredNode | None:
        with self._cond:
            if self._queue and not self._closed:
                return min(self._queue, key=lambda n: n.next_layer)  # the first such, in queue order
            dropped, self._queue = self._queue, []
            self._thread = None
        for node in dropped:  # closed meanwhile
            self._drop(node, "the store was closed")
        return None

    def _drop(self, node: LayeredNode, reason: str | None) -> None:
        """Take ``node`` off the queue and close its file; ``reason``: it failed."""
        with self._cond:
            if node in self._queue:
                self._queue.remove(node)
        if reason is not None:
            node.gate._fail(reason)
        with contextlib.suppress(OSError):
            os.close(node.fd)

    def _run(self) -> None:
        try:
            self._read_all()
        except BaseException as exc:  # never leave a waiter blocked: fail what is left
            with self._cond:
                left, self._queue, self._thread = self._queue, [], None
            for node in left:
                node.gate._fail(f"the reader stopped ({type(exc).__name__}: {exc})")
            log.warning("percache: the K/V layer reader stopped (%s: %s)", type(exc).__name__, exc)

    def _read_all(self) -> None:
        while (node := self._next()) is not None:
            layer = node.next_layer
            try:
                crc = 0
                for offset, length in node.spans[layer]:
                    view = node.data[offset:offset + length].numpy().data
                    done = 0
                    while done < length:
                        n = os.preadv(node.fd, [view[done:]], node.start + offset + done)
                        if n == 0:
                            raise ValueError("file is truncated")
                        done += n
                    if node.crcs is not None:
                        crc = crc_update(crc, node.data[offset:offset + length])
                if node.crcs is not None and crc != node.crcs[layer]:
                    raise ValueError(f"checksum {crc:08x} does not match recorded {node.crcs[layer]:08x}")
            except Exception as exc:  # the file is untrusted input: any failure is corruption
                self._drop(node, str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}")
                continue
            node.next_layer += 1
            node.gate._advance()
            if node.next_layer == node.gate.n_layers:
                self._drop(node, None)

    def close(self, timeout: float | None = None) -> None:
        """Stop reading: fail every node not read yet and wait for the thread to end."""
        with self._cond:
            self._closed = True
            thread = self._thread
            dropped = [] if thread is not None else self._queue
            if thread is None:
                self._queue = []
        for node in dropped:
            self._drop(node, "the store was closed")
        if thread is not None:
            thread.join(timeout)
