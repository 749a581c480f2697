import json

import pytest

from percache_plugin.buffer.sizing import measure_bandwidth, size_loop, weights_bytes
from percache_plugin.cli import main


def test_loop_fits_when_cache_plus_overlap_covers_it() -> None:
    s = size_loop(1000, 600, bandwidth=100.0, tolerance_s=4.0)
    assert s.fits and s.read_per_token_pinned == 400 and s.read_per_token_lru == 1000
    assert s.stall_per_token_pinned_s == 0.0 and s.stall_per_token_lru_s == pytest.approx(6.0)
    t = size_loop(1000, 600, bandwidth=100.0, tolerance_s=3.0)
    assert not t.fits and t.stall_per_token_pinned_s == pytest.approx(1.0)
    assert t.cache_needed_bytes == 700


def test_cache_larger_than_loop_reads_nothing() -> None:
    s = size_loop(1000, 2000, bandwidth=1.0)
    assert s.fits and s.read_per_token_lru == 0 and s.read_per_token_pinned == 0


def test_bad_sizing_input() -> None:
    with pytest.raises(ValueError, match="bandwidth"):
        size_loop(1, 1, 0.0)


def test_bandwidth_is_measured(tmp_path) -> None:
    assert measure_bandwidth(tmp_path, size=4 * 2**20, block=2**20) > 0


def test_weights_bytes(tmp_path) -> None:
    (tmp_path / "a.dat").write_bytes(b"x" * 10)
    (tmp_path / "index.json").write_text("{}")
    assert weights_bytes(tmp_path) == 10
    with pytest.raises(FileNotFoundError):
        weights_bytes(tmp_path / "nope")


def test_sizing_command(capsys) -> None:
    assert main(["sizing", "--loop-bytes", "1000", "--ram", "600", "--bandwidth", "100",
                 "--tolerance-ms", "4000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
