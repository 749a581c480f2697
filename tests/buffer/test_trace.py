import pytest

from percache_plugin.buffer.cli_trace import classify_points
from percache_plugin.buffer.trace import Access, Tracer, blocks, read_trace, summarize
from percache_plugin.buffer.workloads import chat_trace, qmsum_like_trace
from percache_plugin.cli import main


def test_trace_round_trips_through_the_csv_file(tmp_path) -> None:
    path = tmp_path / "t.csv"
    with Tracer(path) as t:
        t.record("r", "a.dat", 0, 100, "hot")
        t.record("w", "b.dat", 4096, 10)
    rows = read_trace(path)
    assert [(a.op, a.file, a.offset, a.size, a.cls) for a in rows] == [
        ("r", "a.dat", 0, 100, "hot"), ("w", "b.dat", 4096, 10, "")]


def test_bad_trace_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("t,op,file,offset,size,cls\n0.1,x,a,0,1,\n")
    with pytest.raises(ValueError, match=r"t.csv:2"):
        read_trace(path)
    path.write_text("hello\n")
    with pytest.raises(ValueError, match="not a percache trace"):
        read_trace(path)


def test_blocks_split_accesses() -> None:
    out = list(blocks([Access(0, "r", "f", 1000, 5000)], 4096))
    assert [k for k, _, _ in out] == [("f", 0), ("f", 1)]


def test_summary_finds_the_loop_and_the_hot_set() -> None:
    acc = []
    for _ in range(4):
        for b in range(200):
            acc.append(Access(0, "r", "w", b * 10, 10))
            if b % 20 == 0:
                acc.append(Access(0, "r", "hot", 0, 10))
    s = summarize(acc, 10, hot_distance=64)
    assert s.hot_blocks == 1 and s.seq_blocks == 0
    assert len(s.loops) == 1 and 200 <= s.loops[0][0] <= 220 and s.loops[0][1] == 3


def test_points_are_classified() -> None:
    acc = [Access(0, "r", "f", 0, 1), Access(1, "r", "f", 0, 1), Access(2, "r", "g", 0, 1, "hot")]
    assert [c for _, _, c in classify_points(acc, 1, 8)] == ["seq", "hot", "hot"]


def test_workloads_record_reads_and_writes() -> None:
    for fn in (qmsum_like_trace, chat_trace):
        t = Tracer()
        fn(t)
        ops = {a.op for a in t.accesses}
        assert ops == {"r", "w"}


def test_trace_command_reports_and_draws(tmp_path, capsys) -> None:
    path = tmp_path / "t.csv"
    with Tracer(path) as t:
        for _ in range(3):
            for b in range(100):
                t.record("r", "w.dat", b * 1024, 1024)
    assert main(["trace", str(path), "--block-kib", "1"]) == 0
    out = capsys.readouterr().out
    assert "loop of ~" in out and (tmp_path / "t.png").is_file()
