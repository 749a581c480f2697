"""Verify cost curves kept in the store per model and machine (decode/stored_cost.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from percache_plugin.decode import SMOLLM2_CPU_COST_PACKED
from percache_plugin.decode.stored_cost import CurveLookup, cpu_identity, curve_key, curve_signature
from percache_plugin.kv.store import DB_NAME
from tests.helpers import SEGMENTS, tiny_pair

FAST = {"cached_tokens": 24, "max_k": 4, "repeats": 1, "progress": False}

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse2 avx avx2 fma bmi2

processor\t: 1
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse2 avx avx2 fma bmi2
"""


def test_cpu_identity_reads_the_model_name_and_the_flags_that_choose_kernels(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert cpu_identity(path) == ("AMD EPYC 7B13 64-Core Processor", ("avx2",))
    path.write_text(CPUINFO.replace("bmi2", "bmi2 avx512f amx_tile"))
    assert cpu_identity(path)[1] == ("avx2", "avx512f", "amx_tile")
    assert cpu_identity(tmp_path / "missing")[1] == ()  # not Linux: no flags, no error


def test_the_signature_names_what_changes_the_curve() -> None:
    model, _ = tiny_pair("llama")
    cpu = ("Some CPU", ("avx2",))
    sig = curve_signature(model, True, cpu=cpu)
    assert sig["cpu"] == "Some CPU" and sig["isa"] == "avx2" and sig["device"] == "cpu"
    assert sig["torch"] == torch.__version__ and sig["dtype"] == "float32" and sig["packed"] == "True"
    assert sig["threads"] == str(torch.get_num_threads())
    assert curve_signature(model, False, cpu=cpu)["packed"] == "False"
    assert curve_signature(model, True, cpu=("Some CPU", ("avx2", "avx512f")))["isa"] == "avx2,avx512f"
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(before + 1)
        assert curve_signature(model, True, cpu=cpu)["threads"] == str(before + 1)
    finally:
        torch.set_num_threads(before)
    assert curve_key("fp", sig) == curve_key("fp", dict(reversed(sig.items())))  # order-free
    assert curve_key("fp", sig) != curve_key("fp", {**sig, "packed": "False"})
    assert curve_key("fp", sig) != curve_key("other", sig)


def test_a_measured_curve_is_loaded_by_a_second_handle_on_the_store(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        assert pc.stats().draft_cost_curve == "built-in"
        curve = pc.measure_verify_cost(**FAST)
        assert pc.stats().draft_cost_curve == "measured now"
        pc.configure(draft_verify_cost=(1.5,))
        assert pc.stats().draft_cost_curve == "given"
    with percache.enable(model, tok, store=tmp_path) as pc:
        assert pc.config.draft_verify_cost is None
        assert pc.stats().draft_cost_curve.startswith("stored (measured ")
        assert pc.engine.drafts.curve(pc.fingerprint, pc.config)[0].ratios == curve
        gen = pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False)
        assert gen.stats.draft_cost_curve.startswith("stored (measured ")
        # another packing is another route: its curve was not measured
        pc.configure(draft_packed_linears=False)
        assert pc.stats().draft_cost_curve == "built-in"


def test_a_curve_is_not_loaded_for_other_weights_or_another_machine(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        pc.measure_verify_cost(**FAST)
        fingerprint, packed = pc.fingerprint, pc.engine.drafts.packs(pc.config)
    other, tok2 = tiny_pair("llama", seed=1)
    with percache.enable(other, tok2, store=tmp_path) as pc:
        assert pc.fingerprint != fingerprint
        assert pc.stats().draft_cost_curve == "built-in"
    same = CurveLookup(tmp_path / DB_NAME)
    elsewhere = CurveLookup(tmp_path / DB_NAME, signature=lambda m, p: {**curve_signature(m, p), "cpu": "Other CPU"})
    assert same.get(fingerprint, model, packed) is not None
    assert elsewhere.get(fingerprint, model, packed) is None
    same.close()
    elsewhere.close()


@pytest.mark.parametrize("ratios", ["[0.5, 1.2]", "not json", "[]", "[1.2, 99]", '{"k": 1.2}', "[true]"])
def test_a_stored_curve_that_does_not_read_as_one_is_ignored_and_counted(tmp_path: Path, ratios: str) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        pc.measure_verify_cost(**FAST)
    with sqlite3.connect(tmp_path / DB_NAME) as db:
        assert db.execute("UPDATE verify_cost_curves SET ratios = ?", (ratios,)).rowcount == 1
    with percache.enable(model, tok, store=tmp_path) as pc:
        totals = pc.stats()
        assert totals.draft_cost_curve == "built-in" and totals.draft_curves_ignored == 1
        gen = pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False)
        assert gen.stats.draft_cost_curve == "built-in"


def test_a_row_under_the_key_with_another_signature_is_ignored(tmp_path: Path) -> None:
    model, _ = tiny_pair("llama")
    lookup = CurveLookup(tmp_path / "db.sqlite")
    lookup.put("fp", model, True, (1.3, 1.4))
    lookup.close()
    with sqlite3.connect(tmp_path / "db.sqlite") as db:
        db.execute("UPDATE verify_cost_curves SET signature = '{}'")
    again = CurveLookup(tmp_path / "db.sqlite")
    assert again.get("fp", model, True) is None and again.ignored == 1
    again.close()


def test_a_failed_write_is_counted_and_the_curve_used_anyway(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        broken = CurveLookup(tmp_path / "no such dir" / DB_NAME)
        pc.engine.drafts.curves = broken
        curve = pc.measure_verify_cost(**FAST)
        assert pc.stats().store_errors == 1
        pc.configure(draft_verify_cost=None)
        assert pc.engine.drafts.curve(pc.fingerprint, pc.config)[0].ratios == curve


def _stored_rows(path: Path) -> list[Any]:
    with sqlite3.connect(path / DB_NAME) as db:
        return db.execute("SELECT key FROM verify_cost_curves").fetchall()


def test_builtin_is_used_without_a_stored_curve(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    with percache.enable(model, tok, store=tmp_path) as pc:
        assert pc.engine.drafts.curve(pc.fingerprint, pc.config)[0] == SMOLLM2_CPU_COST_PACKED
        assert pc.generate(SEGMENTS, max_new_tokens=4, do_sample=False).stats.draft_cost_curve == "built-in"
    assert _stored_rows(tmp_path) == []


def test_a_curve_keeps_when_it_was_measured(tmp_path: Path) -> None:
    model, _ = tiny_pair("llama")
    lookup = CurveLookup(tmp_path / "db.sqlite")
    assert lookup.put("fp", model, True, (1.3,), measured=86400.0).label() == "measured now"
    lookup.close()
    again = CurveLookup(tmp_path / "db.sqlite")
    stored = again.get("fp", model, True)
    assert stored is not None and stored.label() == "stored (measured 1970-01-02 00:00 UTC)"
    again.close()
