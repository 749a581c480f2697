from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from percache_plugin.rag.qmsum import (
    chunk_meeting,
    chunk_turns,
    chunks_for_spans,
    iter_meetings,
    iter_series,
    load_meeting,
    meeting_text,
    series_id,
)

DATA = Path(__file__).parent / "fixtures" / "qmsum"
REPO = Path(__file__).resolve().parents[2]


def test_load_meeting_reads_turns_queries_and_spans() -> None:
    m = load_meeting(DATA / "ALL" / "test" / "ES9001a.json")
    assert (m.id, m.split, len(m.turns)) == ("ES9001a", "test", 12)
    assert m.turns[1] == ("Marketing", "Morning . I brought the market survey results .")
    kinds = [q.kind for q in m.queries]
    assert kinds == ["general", "specific", "specific", "specific"]
    assert m.queries[0].spans == ()
    assert m.queries[1].spans == ((4, 5),) and m.queries[3].spans == ((3, 3),)
    assert m.topics[0].spans == ((0, 2),)


def test_bad_spans_and_files_are_named(tmp_path: Path) -> None:
    raw = json.loads((DATA / "ALL" / "test" / "ES9001b.json").read_text())
    raw["specific_query_list"][0]["relevant_text_span"] = [["5", "8"]]
    bad = tmp_path / "X1.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(
        ValueError, match=r"X1.json specific query 0: span \['5', '8'\] is outside turns 0..7"
    ):
        load_meeting(bad)
    bad.write_text("{}")
    with pytest.raises(ValueError, match="X1.json is not a QMSum meeting file"):
        load_meeting(bad)


def test_iter_meetings_by_split_and_root_forms() -> None:
    assert [m.id for m in iter_meetings(DATA, "test")] == ["ES9001a", "ES9001b"]
    assert [m.id for m in iter_meetings(DATA / "ALL")] == ["covid_1", "ES9001a", "ES9001b"]
    with pytest.raises(ValueError, match="split must be one of"):
        list(iter_meetings(DATA, "dev"))
    with pytest.raises(FileNotFoundError, match="no QMSum split folders"):
        list(iter_meetings(DATA / "ALL" / "test"))


@pytest.mark.parametrize(
    ("meeting_id", "series"),
    [
        ("ES2002a", "ES2002"),
        ("IS1003d", "IS1003"),
        ("TS3011b", "TS3011"),
        ("Bed004", "Bed"),
        ("Bmr019", "Bmr"),
        ("covid_4", "covid"),
        ("education_13", "education"),
        ("odd", "odd"),
    ],
)
def test_series_id(meeting_id: str, series: str) -> None:
    assert series_id(meeting_id) == series


def test_iter_series_orders_meetings() -> None:
    series = [(s, [m.id for m in ms]) for s, ms in iter_series(DATA)]
    assert series == [("ES9001", ["ES9001a", "ES9001b"]), ("covid", ["covid_1"])]


def test_meeting_text_has_one_line_per_turn() -> None:
    m = load_meeting(DATA / "ALL" / "train" / "covid_1.json")
    lines = meeting_text(m).split("\n")
    assert len(lines) == len(m.turns)
    assert lines[3] == "The Chair (Hon. Anthony Rota): "  # an empty turn keeps its line
    assert lines[1].startswith("Mr. Andrew Scheer (Regina-Qu'Appelle, CPC): Mr. Chair ,")


def test_chunk_meeting_covers_every_turn_once_and_maps_gold() -> None:
    m = load_meeting(DATA / "ALL" / "test" / "ES9001a.json")
    chunks = chunk_meeting(m, target_words=30)
    ranges = [chunk_turns(c) for c in chunks]
    assert ranges[0][0] == 0 and ranges[-1][1] == len(m.turns) - 1
    assert all(
        b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:], strict=False)
    )  # no gap, no overlap
    assert len(chunks) > 2
    for chunk, (first, last) in zip(chunks, ranges, strict=True):
        assert chunk.text.split("\n") == meeting_text(m).split("\n")[first : last + 1]
        assert chunk.metadata["meeting"] == "ES9001a"
    gold = chunks_for_spans(chunks, [(8, 9)])
    assert gold and all(chunk_turns(c)[0] <= 9 and chunk_turns(c)[1] >= 8 for c in gold)
    assert len(gold) < len(chunks)
    with pytest.raises(ValueError, match="no 'turns' metadata"):
        chunk_turns(chunks[0].__class__("x", "d", 0, "t", None, {}))


def test_benchmark_runs_on_the_fixture(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "retrieval.py"),
        "--data",
        str(DATA),
        "--split",
        "test",
        "--target-words",
        "30",
        "--k",
        "2",
        "--embedder",
        "hash:64",
        "--json",
        str(out),
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "| BM25 |" in run.stdout and "| embeddings |" in run.stdout
    report = json.loads(out.read_text())
    assert (report["meetings"], report["queries"]) == (2, 4)
    names = list(report["results"])
    assert names[:3] == ["BM25", "embeddings", "RRF k=60, equal weights"]
    assert names[3].startswith("hybrid (default): weighted RRF k=5")
    assert report["results"]["BM25"]["hit_at_k"] > report["random_hit_at_k"]
