"""``percache bench e2e`` on a tiny random model, the byte tokenizer and the QMSum fixture."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from percache_plugin.bench import e2e
from percache_plugin.bench.e2e_methods import (
    METHODS,
    MethodUnavailable,
    method_config,
    select_methods,
)
from percache_plugin.bench.e2e_report import PER_STREAM, plot_key
from percache_plugin.config import Config
from tests.helpers import tiny_pair

FIXTURE = Path(__file__).resolve().parent.parent / "rag" / "fixtures" / "qmsum"
PARA = {"pairs": [
    {"meeting": "ES9001a", "query": "What did Marketing report from the market survey?",
     "paraphrase": "What were the market survey findings Marketing presented?"},
    {"meeting": "ES9001a", "query": "What was the budget for the remote control?",
     "paraphrase": "How much money was there for the remote?"}]}


def _settings(out: Path, **changes: object) -> e2e.E2ESettings:
    para = out / "paraphrases.json"
    para.write_text(json.dumps(PARA))
    base = e2e.E2ESettings(
        data=FIXTURE, users=1, queries=3, methods=("naive", "ragcache+meancache"),
        max_new_tokens=4, max_meetings=2, tau_sweep=(0.7, 0.9),
        sweep_method="ragcache+meancache", out=out, progress=False, paraphrase_files=(para,),
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("e2e")
    return e2e.run_benchmark(_settings(out), load_model=lambda: tiny_pair("llama"),
                             embedder="hash", model_name="tiny llama")


def test_outputs_written(payload: dict) -> None:
    out = Path(payload["settings"]["out"])
    data = json.loads((out / "results.json").read_text())
    assert set(data) >= {"model", "embedder", "settings", "methods", "users", "summary", "runs",
                         "tau_sweep", "plots", "wall_s", "streams"}
    assert data["streams"] == ["original", "paraphrase"]
    assert [u["id"] for u in data["users"]] == ["ES9001"]
    assert data["users"][0]["meetings"] == ["ES9001a", "ES9001b"]
    assert [r["status"] for r in data["runs"]] == ["ok"] * 4, [r["reason"] for r in data["runs"]]
    assert [(r["stream"], r["method"]) for r in data["runs"]] == [
        ("original", "naive"), ("original", "ragcache+meancache"),
        ("paraphrase", "naive"), ("paraphrase", "ragcache+meancache")]
    for run in data["runs"]:
        n = 3 if run["stream"] == "original" else 4  # 3 questions + 1 rewording (25%)
        assert len(run["queries"]) == n and run["summary"]["queries"] == n
        repeats = [q for q in run["queries"] if q["repeat_of"] is not None]
        assert len(repeats) == (run["stream"] == "paraphrase")
        for q in repeats:  # a rewording is scored against its original's reference
            assert q["reference"] == run["queries"][q["repeat_of"]]["reference"]
            assert q["question"] != run["queries"][q["repeat_of"]]["question"]
    para_user = data["users"][0]["streams"]["paraphrase"]
    assert para_user["repeat_rate"] == pytest.approx(0.25)
    assert data["summary"]["paraphrase"]["naive"]["repeat_rate"] == pytest.approx(0.25)
    assert data["summary"]["original"]["naive"]["repeat_rate"] == 0
    for q in data["runs"][0]["queries"]:  # the baselines decode plainly
        assert q["drafting"] == "off" and q["tokens_drafted"] == 0
    for name in ("naive", "ragcache+meancache"):
        s = data["summary"]["original"][name]
        for key in ("latency_mean_s", "latency_p50_s", "latency_p95_s", "ttft_mean_s",
                    "ttft_p50_s", "ttft_p95_s", "qa_hit_rate", "kv_hit_ratio", "rouge_l_ref",
                    "rouge_l_naive", "stored_bytes", "bg_prefill_tokens", "bg_decode_tokens",
                    "fg_prefill_tokens", "fg_decode_tokens"):
            assert key in s
        assert sum(s["bg_prefill_by_kind"].values()) == s["bg_prefill_tokens"]
    naive, cached = data["summary"]["original"]["naive"], data["summary"]["original"]["ragcache+meancache"]
    assert naive["kv_hit_ratio"] == 0.0 and naive["stored_bytes"] == 0
    assert naive["rouge_l_naive"] == pytest.approx(1.0)  # naive against itself
    assert cached["stored_bytes"] > 0
    assert cached["kv_hit_ratio"] > 0  # the system prompt at least is reused exactly
    assert cached["fg_prefill_tokens"] < naive["fg_prefill_tokens"]
    taus = [p["tau"] for p in data["tau_sweep"]]
    assert taus == sorted(taus) and {0.7, 0.9} <= set(taus)
    default_tau = Config().similarity_threshold
    assert [p["tau"] for p in data["tau_sweep"] if p["note"]] == [default_tau]  # the main run
    md = (out / "results.md").read_text()
    assert "| method |" in md and "RAGCache+MeanCache" in md and "Naive" in md
    assert "## Stream paraphrase: all users" in md and "tokens drafted" in md
    assert data["sweep_stream"] == "paraphrase"
    assert set(data["plots"]) == _plot_keys(data["streams"])
    for name in data["plots"].values():
        png = out / name
        assert png.is_file() and png.stat().st_size > 1000
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "results.partial.json").exists()  # only kept when a run is cut short


def _plot_keys(streams: list[str]) -> set[str]:
    return {"tau_sweep"} | {plot_key(k, s) for k in PER_STREAM for s in streams}


def test_replot_from_json(payload: dict) -> None:
    out = Path(payload["settings"]["out"])
    for name in payload["plots"].values():
        (out / name).unlink()
    again = e2e.replot(out)
    assert set(again["plots"]) == _plot_keys(["original", "paraphrase"])
    assert all((out / name).stat().st_size > 1000 for name in again["plots"].values())
    with pytest.raises(FileNotFoundError):
        e2e.replot(out / "nowhere")


def test_predicting_method_runs_or_is_skipped_at_setup(tmp_path: Path) -> None:
    """Until the engine has prediction, predicting methods are skipped with a reason; once it
    has, they run. Either way the harness completes."""
    data = e2e.run_benchmark(
        _settings(tmp_path, methods=("naive", "sleeptime"), queries=2, tau_sweep=(),
                  streams=("original",)),
        load_model=lambda: tiny_pair("llama"), embedder="hash")
    status = {r["method"]: (r["status"], r["reason"]) for r in data["runs"]}
    assert status["naive"][0] == "ok"
    assert status["sleeptime"][0] in ("ok", "skipped"), status["sleeptime"]
    if status["sleeptime"][0] == "skipped":
        assert "predict" in status["sleeptime"][1]
    assert (tmp_path / "results.md").is_file()


def test_method_table() -> None:
    names = [m.name for m in METHODS]
    assert len(names) == len(set(names)) == 10
    assert [m.name for m in select_methods(["percache", "naive"])] == ["naive", "percache"]
    with pytest.raises(ValueError, match="unknown method"):
        select_methods(["nope"])
    naive = select_methods(["naive"])[0]
    known = {"use_kv", "use_qa_bank", "reuse"}
    assert method_config(naive, fields=known) == {"use_kv": False, "use_qa_bank": False}
    with pytest.raises(MethodUnavailable, match="predict"):
        method_config(select_methods(["percache"])[0], fields=known | {"similarity_threshold"})


def test_user_selection() -> None:
    users = e2e.select_users(FIXTURE, 2, 1, max_meetings=4)
    assert [u.id for u in users] == ["ES9001", "covid"]
    assert [q.meeting for q in users[0].questions] == ["ES9001a"]
    with pytest.raises(ValueError, match="specific questions"):
        e2e.select_users(FIXTURE, 1, 50, max_meetings=4)
    with pytest.raises(ValueError, match="unknown series"):
        e2e.select_users(FIXTURE, 1, 1, max_meetings=1, series=["nope"])


def test_smoke_flags() -> None:
    p = argparse.ArgumentParser()
    e2e.add_arguments(p)
    s = e2e.settings_from_args(p.parse_args(["--smoke"]))
    assert (s.users, s.queries, s.max_meetings, s.tau_sweep) == (1, 3, 1, ())
    assert s.max_new_tokens == e2e.SMOKE_MAX_NEW_TOKENS
    assert s.methods is not None and len(s.methods) == 2
    s = e2e.settings_from_args(p.parse_args(["--smoke", "--queries", "5", "--tau-sweep", "0.6,0.9"]))
    assert s.queries == 5 and s.tau_sweep == (0.6, 0.9)
    assert s.streams == ("original",)  # the CI run stays short
    full = e2e.settings_from_args(p.parse_args([]))
    assert full.methods is None and full.tau_sweep == e2e.DEFAULT_TAUS
    assert full.streams == ("original", "paraphrase")
    assert e2e.settings_from_args(p.parse_args(["--stream", "paraphrase"])).streams == ("paraphrase",)


def test_combine_parts_run_side_by_side(tmp_path: Path) -> None:
    """One run per stream, merged: the summaries are those of one run over both streams."""
    parts = []
    for stream in ("original", "paraphrase"):
        out = tmp_path / stream
        out.mkdir()
        e2e.run_benchmark(_settings(out, methods=("naive",), queries=2, tau_sweep=(),
                                    streams=(stream,)),
                          load_model=lambda: tiny_pair("llama"), embedder="hash")
        parts.append(out)
    data = e2e.combine(parts, tmp_path / "all")
    assert data["streams"] == ["original", "paraphrase"]
    assert [(r["stream"], r["method"]) for r in data["runs"]] == [("original", "naive"),
                                                                  ("paraphrase", "naive")]
    assert data["summary"]["paraphrase"]["naive"]["queries"] == 3
    assert set(data["users"][0]["streams"]) == {"original", "paraphrase"}
    assert (tmp_path / "all" / "results.md").is_file()
    with pytest.raises(ValueError, match="twice"):
        e2e.combine([parts[0], parts[0]], tmp_path / "dup")


def test_combine_scores_parts_run_without_naive(tmp_path: Path) -> None:
    """Methods run in another part than naive get their ROUGE-L vs naive when combined, the
    same figure a run with naive in it gives them."""
    parts = []
    for methods in (("naive",), ("ragcache+meancache",)):
        out = tmp_path / methods[0]
        out.mkdir()
        e2e.run_benchmark(_settings(out, methods=methods, queries=2, tau_sweep=(),
                                    streams=("original",)),
                          load_model=lambda: tiny_pair("llama"), embedder="hash")
        parts.append(out)
    alone = json.loads((parts[1] / "results.json").read_text())
    assert all(q["rouge_l_naive"] is None for q in alone["runs"][0]["queries"])
    together = tmp_path / "together"
    together.mkdir()
    both = e2e.run_benchmark(_settings(together, methods=("naive", "ragcache+meancache"), queries=2,
                                       tau_sweep=(), streams=("original",)),
                             load_model=lambda: tiny_pair("llama"), embedder="hash")
    data = e2e.combine(parts, tmp_path / "all")
    run = next(r for r in data["runs"] if r["method"] == "ragcache+meancache")
    want = next(r for r in both["runs"] if r["method"] == "ragcache+meancache")
    assert [q["answer"] for q in run["queries"]] == [q["answer"] for q in want["queries"]]
    assert [q["rouge_l_naive"] for q in run["queries"]] == [q["rouge_l_naive"] for q in want["queries"]]
    assert run["summary"]["rouge_l_naive"] == want["summary"]["rouge_l_naive"] is not None
    summary = data["summary"]["original"]["ragcache+meancache"]
    assert summary["rouge_l_naive"] == want["summary"]["rouge_l_naive"]


def test_one_stream_runs_choose_the_same_users(tmp_path: Path) -> None:
    """A run of the original stream alone chooses among the users with rewordings, as a
    paraphrase run does, so runs of one stream each can be combined."""
    base = _settings(tmp_path, methods=("naive",), tau_sweep=(), streams=("original",))
    data = e2e.run_benchmark(base, load_model=lambda: tiny_pair("llama"), embedder="hash")
    assert data["users"][0]["id"] == "ES9001"
    (tmp_path / "none.json").write_text(json.dumps({"pairs": []}))
    base.paraphrase_files = (tmp_path / "none.json",)
    with pytest.raises(ValueError, match="rewordings for the paraphrase stream"):
        e2e.run_benchmark(base, load_model=lambda: tiny_pair("llama"), embedder="hash")
    base.paraphrase_files = (tmp_path / "missing.json",)  # no files: any user, original only
    data = e2e.run_benchmark(base, load_model=lambda: tiny_pair("llama"), embedder="hash")
    assert data["users"][0]["id"] == "ES9001"
