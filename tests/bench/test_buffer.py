from percache_plugin.bench.buffer import POLICIES, sweep
from percache_plugin.bench.ttft import drop_page_cache
from percache_plugin.buffer.trace import Access


def test_sweep_gives_every_policy_a_ratio_per_size() -> None:
    loop = [Access(0, "r", "w", b * 1024, 1024) for _ in range(5) for b in range(40)]
    res = sweep(loop, 1024)
    assert res["distinct_blocks"] == 40 and res["reads"] == 200
    half = next(r for r in res["rows"] if r["share"] == 0.5)
    assert half["lru"] == 0.0 and half["llm"] >= 0.3
    assert all(0.0 <= r[p] <= 1.0 for r in res["rows"] for p in POLICIES)


def test_drop_page_cache_visits_every_file(tmp_path) -> None:
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"y")
    assert drop_page_cache(tmp_path) == 2


def test_a_recorded_kv_trace_is_read_and_a_missing_one_named(tmp_path) -> None:
    import pytest

    from percache_plugin.bench.buffer import recorded_trace
    from percache_plugin.buffer.trace import write_trace
    from percache_plugin.cli_errors import UsageError

    trace = tmp_path / "kv.csv"
    write_trace(trace, [Access(0, "r", f"kv/n{b}", 0, 2048, "") for _ in range(3) for b in range(8)])
    with pytest.raises(UsageError, match="no such file"):
        recorded_trace(tmp_path / "none.csv")
    res = sweep(recorded_trace(trace), 1024)
    assert res["reads"] == 48 and res["distinct_blocks"] == 16


def test_the_committed_kv_traces_are_those_of_the_benchmarks_doc() -> None:
    from pathlib import Path

    from percache_plugin.bench.buffer import recorded_trace
    from percache_plugin.buffer.trace import blocks

    folder = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "traces"
    expected = {"kv-replay": (876, 514), "kv-e2e": (228, 138), "kv-e2e-2streams": (76, 36),
                "kv-e2e-3users": (120, 71)}
    for name, (reads, distinct) in expected.items():
        bl = list(blocks(recorded_trace(folder / f"{name}.csv"), 1 << 20))
        assert (len(bl), len({k for k, _, _ in bl})) == (reads, distinct), name
