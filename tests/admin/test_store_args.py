"""``percache store`` refusing bad arguments before it changes anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from percache_plugin.admin import StoreAdmin
from percache_plugin.cli import main
from tests.admin.test_store_admin import _filled


def _nodes(store: Path) -> int:
    with StoreAdmin(store) as admin:
        return sum(len(admin.kv_store(fp).nodes()) for fp in admin.fingerprints())


def test_purge_keeping_a_fingerprint_not_in_the_store_removes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _filled(tmp_path)
    before = _nodes(tmp_path)
    assert before > 0
    assert main(["store", "purge", str(tmp_path), "--keep", "0000mistyped"]) == 2
    err = capsys.readouterr().err
    assert "'0000mistyped' is not in the store" in err and "store info" in err
    assert _nodes(tmp_path) == before
    with StoreAdmin(tmp_path) as admin, pytest.raises(ValueError, match="not in the store"):
        admin.purge("0000mistyped")
    assert _nodes(tmp_path) == before


def test_remove_in_the_wrong_scope_names_the_documents_scopes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _filled(tmp_path)
    assert main(["store", "remove", str(tmp_path), "--doc", "ana", "--scope", "work"]) == 2
    err = capsys.readouterr().err
    assert "no document 'ana' in scope 'work'" in err and "its scopes: ['me']" in err
    with StoreAdmin(tmp_path) as admin:
        assert {d.doc_id for d in admin.documents()} == {"ana", "ben"}
