"""KVStore crash safety: SIGKILL a writer mid-write, then the store must open clean."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from percache_plugin.kv.integrity import TEMP_PREFIX
from percache_plugin.kv.store import ChunkKV, KVStore

REPO = Path(__file__).resolve().parents[2]
FP = "crash-fp"
LAYERS, HEADS, TOKENS, DIM = 4, 4, 512, 64  # 4 MiB fp32 per node


def node_kv(i: int) -> ChunkKV:
    base = torch.arange(HEADS * TOKENS * DIM, dtype=torch.float32).reshape(HEADS, TOKENS, DIM)
    return ChunkKV(tuple(base + (i * 100 + layer) for layer in range(LAYERS)),
                   tuple(-base - (i * 100 + layer) for layer in range(LAYERS)))


def node_ids(i: int) -> list[int]:
    return list(range(i, i + TOKENS))


# The writer pauses at a chosen point so the kill lands exactly there; the store code is
# untouched, only the child's view of os.replace is wrapped.
WRITER = f"""
import os, sys, time, types
# Bare package object: the store needs only torch + safetensors, and the package
# __init__ (engine, transformers) would triple the child's start-up time.
pkg = types.ModuleType("percache_plugin")
pkg.__path__ = [{str(REPO / "percache_plugin")!r}]
sys.modules["percache_plugin"] = pkg
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import percache_plugin.kv.integrity as integrity
from percache_plugin.kv.store import KVStore
from test_store_crash import node_ids, node_kv, FP

path, prefix, stop_at = sys.argv[1], sys.argv[2], sys.argv[3]
state = {{"i": 0}}

def pause(point):
    if point == stop_at and state["i"] >= 1:
        print(point, flush=True)
        time.sleep(60)

replace = os.replace
def wrapped_replace(*a, **k):
    pause("after-temp")  # the temp file is written and fsynced, not yet renamed
    replace(*a, **k)
    pause("after-replace")
os.replace = wrapped_replace

store = KVStore(path, fingerprint=FP)
while True:
    i = state["i"]
    store.put(f"{{prefix}}-{{i}}", node_kv(i), parent=None, start=0, token_ids=node_ids(i))
    print(f"ok {{prefix}}-{{i}}", flush=True)
    state["i"] = i + 1
"""


def _reader(proc: subprocess.Popen) -> queue.Queue[str | None]:
    """Lines from the writer's stdout, via a thread (select() misses already-buffered lines)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _next_line(proc: subprocess.Popen, lines: queue.Queue[str | None], timeout: float) -> str:
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        proc.kill()
        pytest.fail(f"writer printed nothing for {timeout} s")
    if line is None:
        proc.wait()
        pytest.fail(f"writer died on its own: {proc.stderr.read()}")
    return line


def _files(root: Path) -> tuple[list[Path], list[Path]]:
    files = [p for p in (root / "kv").rglob("*") if p.is_file() and p.name not in (".lock", ".write.lock")]
    temps = [p for p in files if p.name.startswith(TEMP_PREFIX)]
    return temps, [p for p in files if p not in temps]


def _kill_writer(root: Path, prefix: str, stop_at: str, delay: float) -> list[str]:
    """Run a writer until ``stop_at`` (or ``delay`` after its first node), SIGKILL it."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), prefix, stop_at],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    lines = _reader(proc)
    written: list[str] = []
    try:
        while True:
            line = _next_line(proc, lines, 60)
            if line.startswith("ok "):
                written.append(line[3:])
                if stop_at == "never":
                    break
            elif line == stop_at:
                break
        time.sleep(delay)
        assert proc.poll() is None, f"writer exited before the kill: {proc.stderr.read()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    while (line := lines.get(timeout=30)) is not None:  # what it printed before dying
        if line.startswith("ok "):
            written.append(line[3:])
    return written


def _check_store(root: Path, committed: set[str]) -> set[str]:
    """Open after a crash: clean directory, every committed node present and exact."""
    with KVStore(root, fingerprint=FP) as store:
        temps, files = _files(root)
        keys = {n.key for n in store.nodes()}
        assert temps == []
        assert sorted(p.name for p in files) == sorted(f"{k}.safetensors" for k in keys)
        assert committed <= keys  # everything the writer saw committed survived
        for key in keys:
            i = int(key.rsplit("-", 1)[1])
            got = store.get(key, token_ids=node_ids(i))
            assert got is not None, key
            assert all(torch.equal(a, b) for a, b in zip(
                got.keys + got.values, node_kv(i).keys + node_kv(i).values, strict=True))
        assert store.stats().corrupt == 0
        return keys


def test_sigkill_mid_write_leaves_a_clean_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    committed: set[str] = set()
    stored: set[str] = set()
    rounds = [("after-temp", 0.0), ("after-replace", 0.0), ("never", 0.013)]
    for n, (stop_at, delay) in enumerate(rounds):
        written = set(_kill_writer(root, f"r{n}", stop_at, delay))
        temps, files = _files(root)
        if stop_at == "after-temp":
            assert temps, "the kill should have left a temp file behind"
        if stop_at == "after-replace":  # renamed into place, row never committed
            assert len(files) == len(stored | written) + 1, "expected one file without a row"
        committed |= written
        stored = _check_store(root, committed)


def test_sweep_spares_a_store_that_is_still_open(tmp_path: Path) -> None:
    with KVStore(tmp_path, fingerprint=FP) as live:
        live.put("n-0", node_kv(0), parent=None, start=0, token_ids=node_ids(0))
        in_flight = next((tmp_path / "kv").glob("*/")) / f"{TEMP_PREFIX}123-abc.safetensors"
        in_flight.write_bytes(b"partial")
        KVStore(tmp_path, fingerprint=FP).close()  # another opener must not sweep it
        assert in_flight.exists()
    with KVStore(tmp_path, fingerprint=FP) as store:
        assert not in_flight.exists()
        assert store.get("n-0") is not None


def test_open_removes_rows_without_files_and_files_without_rows(tmp_path: Path) -> None:
    with KVStore(tmp_path, fingerprint=FP) as s:
        for i in range(3):
            s.put(f"n-{i}", node_kv(i), parent=None, start=0, token_ids=node_ids(i))
        fp_dir = next((tmp_path / "kv").glob("*/"))
    (fp_dir / "n-1.safetensors").unlink()
    (fp_dir / "stray.safetensors").write_bytes(b"x")
    os.makedirs(tmp_path / "kv" / "unknownfp")
    (tmp_path / "kv" / "unknownfp" / "zz.safetensors").write_bytes(b"x")
    with KVStore(tmp_path, fingerprint=FP) as s:
        assert [n.key for n in s.nodes()] == ["n-0", "n-2"]
        temps, files = _files(tmp_path)
        assert sorted(p.name for p in files) == ["n-0.safetensors", "n-2.safetensors"]
        assert s.stats().corrupt == 0
