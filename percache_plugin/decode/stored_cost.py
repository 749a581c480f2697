"""Verify cost curves measured on this machine, kept in the store's database.

A curve measured by :mod:`.calibrate` (``pc.measure_verify_cost()``, or the idle task
``calibrate``) holds only for the model and the machine it was measured on, so it is stored
under a key of both: the model's fingerprint and :func:`curve_signature` (CPU model and the ISA
flags its kernels choose by, the device and GPU name, torch's version and thread count, the
model's dtype, and whether verify forwards run over packed linear weights). A handle whose
``Config.draft_verify_cost`` is None looks its key up once (:class:`CurveLookup`) and prices
drafts by the curve found there, else by the built-in one (:mod:`.cost`). ``Config.draft_tree``
is not in the key: token trees are priced by the same curve, and the measuring never feeds one.

A stored row that does not read as a curve (not a list of 1-64 ratios in
``[1, MAX_RATIO]``, or a signature other than the one its key was made from) is ignored and
counted, never raised.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import platform
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..best_effort import WRITE_FAILURES
from ..sqlite_tx import Schema, connect

__all__ = ["ISA_FLAGS", "MAX_RATIO", "CurveLookup", "Signature", "StoredCurve", "cpu_identity",
           "curve_key", "curve_signature"]

log = logging.getLogger("percache")

ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")
"""The CPU flags (``/proc/cpuinfo``) that decide which kernels torch and oneDNN run."""
MAX_RATIO = 32.0
"""A stored ratio above this is not a measured verify cost (a one-token forward is 1.0)."""

_SCHEMA = Schema("verify_cost", 1, """
CREATE TABLE IF NOT EXISTS verify_cost_curves (key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL,
    signature TEXT NOT NULL, ratios TEXT NOT NULL, measured REAL NOT NULL);
""")

Signature = Callable[[Any, bool], dict[str, str]]
"""``(model, packed) -> signature``: :func:`curve_signature`, or a caller's own (tests)."""


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, tuple[str, ...]]:
    """The CPU's model name and which of :data:`ISA_FLAGS` it has (``platform.processor()``
    and no flags where ``cpuinfo`` cannot be read: not Linux)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return platform.processor() or platform.machine(), ()
    name, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and not name:
            name = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return name or platform.machine(), tuple(f for f in ISA_FLAGS if f in flags)


def curve_signature(model: Any, packed: bool, *,
                    cpu: tuple[str, tuple[str, ...]] | None = None) -> dict[str, str]:
    """What besides the weights changes a verify cost curve of ``model`` on this machine now.

    :param packed: whether verify forwards run over packed linear weights.
    :param cpu: :func:`cpu_identity` read once by the caller (read now if None).
    """
    name, flags = cpu if cpu is not None else cpu_identity()
    try:
        param = next(model.parameters())
        device, dtype = param.device, str(param.dtype).removeprefix("torch.")
    except (AttributeError, StopIteration):
        device, dtype = torch.device("cpu"), ""
    sig = {"cpu": name, "isa": ",".join(flags), "torch_cpu": torch.backends.cpu.get_cpu_capability(),
           "device": device.type, "torch": torch.__version__, "threads": str(torch.get_num_threads()),
           "dtype": dtype, "packed": str(bool(packed))}
    if device.type == "cuda":
        sig["gpu"] = torch.cuda.get_device_name(device)
    return sig


def curve_key(fingerprint: str, signature: dict[str, str]) -> str:
    """The row key of a curve: the fingerprint and a hash of the signature."""
    digest = hashlib.sha256(json.dumps(signature, sort_keys=True).encode("utf-8")).hexdigest()
    return f"{fingerprint}/{digest[:20]}"


@dataclass(frozen=True)
class StoredCurve:
    """A curve read from the store: ``ratios`` for ``k = 1, 2, ...`` and when it was measured
    (``time.time()``); ``here``: measured by this handle."""

    ratios: tuple[float, ...]
    measured: float
    here: bool = False

    def label(self) -> str:
        """How stats name it: ``"measured now"`` or ``"stored (measured <UTC date>)"``."""
        if self.here:
            return "measured now"
        return "stored (measured " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.measured)) + ")"


def _ratios(text: str) -> tuple[float, ...] | None:
    try:
        values = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(values, list) or not 1 <= len(values) <= 64:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               and 1.0 <= v <= MAX_RATIO for v in values):
        return None
    return tuple(float(v) for v in values)


class CurveLookup:
    """The curves of one store, looked up once per key by this handle.

    :param db_path: the store's SQLite file, or None (memory: curves last as long as the handle).
    :param signature: :func:`curve_signature` unless a caller gives its own.
    :ivar ignored: stored rows that did not read as a curve (and were not used).
    """

    def __init__(self, db_path: Path | None, signature: Signature | None = None) -> None:
        self._db_path = db_path
        self._signature = signature
        self._cpu: tuple[str, tuple[str, ...]] | None = None
        self._db: Any = None
        self._lock = threading.RLock()
        self._seen: dict[str, StoredCurve | None] = {}
        self.ignored = 0

    def signature(self, model: Any, packed: bool) -> dict[str, str]:
        if self._signature is not None:
            return self._signature(model, packed)
        if self._cpu is None:
            self._cpu = cpu_identity()
        return curve_signature(model, packed, cpu=self._cpu)

    def key(self, fingerprint: str, model: Any, packed: bool) -> str:
        return curve_key(fingerprint, self.signature(model, packed))

    def _open(self) -> Any:
        if self._db is None:
            self._db = connect(self._db_path, _SCHEMA)
        return self._db

    def get(self, fingerprint: str, model: Any, packed: bool) -> StoredCurve | None:
        """The stored curve for this model and machine now, or None (read once per key; a
        database that cannot be read counts as none, logged)."""
        sig = self.signature(model, packed)
        key = curve_key(fingerprint, sig)
        with self._lock:
            if key not in self._seen:
                self._seen[key] = self._read(key, sig)
            return self._seen[key]

    def _read(self, key: str, sig: dict[str, str]) -> StoredCurve | None:
        try:
            row = self._open().execute("SELECT signature, ratios, measured FROM verify_cost_curves"
                                       " WHERE key = ?", (key,)).fetchone()
        except (*WRITE_FAILURES, PermissionError, ValueError) as exc:
            log.warning("percache: reading the stored verify cost curve failed (%s: %s); using the "
                        "built-in one", type(exc).__name__, exc)
            return None
        if row is None:
            return None
        ratios = _ratios(row[1])
        try:
            same = json.loads(row[0]) == sig
        except (TypeError, ValueError):
            same = False
        if ratios is None or not same or not isinstance(row[2], (int, float)) or not math.isfinite(row[2]):
            self.ignored += 1
            log.warning("percache: ignoring a stored verify cost curve that does not read as one (key %s)", key)
            return None
        return StoredCurve(ratios, float(row[2]))

    def put(self, fingerprint: str, model: Any, packed: bool, ratios: Sequence[float], *,
            measured: float | None = None) -> StoredCurve:
        """Store ``ratios`` as the curve for this model and machine now, measured at ``measured``
        (``time.time()``; default: now), and use it from now on. Raises what a failed write
        raises (callers wrap it in ``best_effort``); the handle uses the curve even then."""
        sig = self.signature(model, packed)
        key = curve_key(fingerprint, sig)
        curve = StoredCurve(tuple(float(r) for r in ratios), time.time() if measured is None else measured,
                            here=True)
        with self._lock:
            self._seen[key] = curve
            self._open().execute("INSERT OR REPLACE INTO verify_cost_curves VALUES (?, ?, ?, ?, ?)",
                                 (key, fingerprint, json.dumps(sig, sort_keys=True),
                                  json.dumps(list(curve.ratios)), curve.measured))
        return curve

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
