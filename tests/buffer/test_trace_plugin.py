from pathlib import Path

import percache_plugin as percache
from percache_plugin.buffer.trace import read_trace
from tests.helpers import SEGMENTS, tiny_pair


def test_kv_trace_records_node_writes_then_reads(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    path = tmp_path / "kv.csv"
    pc = percache.enable(model, tok, store=tmp_path / "s", kv_trace=str(path))
    first = pc.generate(SEGMENTS, max_new_tokens=1)
    second = pc.generate(SEGMENTS, max_new_tokens=1)
    nodes = {n.key: n for n in pc.store.nodes()}
    pc.close()
    rows = read_trace(path)
    writes = [a for a in rows if a.op == "w"]
    reads = [a for a in rows if a.op == "r"]
    assert first.stats.nodes_reused == 0 and len(writes) == len(nodes) > 0
    assert len(reads) == second.stats.nodes_reused > 0
    for a in rows:
        node = nodes[a.file.removeprefix("kv/")]
        assert a.size == node.nbytes
        assert a.cls == ("hot" if node.parent is None else "")


def test_kv_trace_off_records_nothing_and_can_be_switched_on(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    path = tmp_path / "kv.csv"
    pc = percache.enable(model, tok, store=tmp_path / "s")
    pc.generate(SEGMENTS, max_new_tokens=1)
    assert not path.exists()
    pc.configure(kv_trace=str(path))
    g = pc.generate(SEGMENTS, max_new_tokens=1)
    pc.close()
    assert [a.op for a in read_trace(path)] == ["r"] * g.stats.nodes_reused


def test_a_second_handle_appends_to_the_same_trace(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    path = tmp_path / "kv.csv"
    ops = []
    for _ in range(2):
        pc = percache.enable(model, tok, store=tmp_path / "s", kv_trace=str(path))
        ops.append(pc.generate(SEGMENTS, max_new_tokens=1).stats.nodes_reused)
        pc.close()
    rows = read_trace(path)
    assert ops[0] == 0 and ops[1] > 0
    assert [a.op for a in rows] == ["w"] * (len(rows) - ops[1]) + ["r"] * ops[1]
