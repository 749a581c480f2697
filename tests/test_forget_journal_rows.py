"""The forget journal's rows on their own (no model): who may drop a row whose id resolves again,
and what a re-run is given. Two journals on one database stand for two handles; a subprocess
that exits stands for a process that died with its forget unfinished."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from percache_plugin.forget_journal import ForgetJournal, ForgetKind

REPO = Path(__file__).resolve().parents[2]


class Chunks:
    """A kind whose ids in ``live`` resolve; re-runs are recorded."""

    def __init__(self, live: set[str]) -> None:
        self.live = live
        self.reruns: list[list[str]] = []
        self.kind = ForgetKind(lambda i: i in self.live, self.reruns.append)


def _journal(db: Path, chunks: Chunks) -> ForgetJournal:
    journal = ForgetJournal(db)
    journal.register("chunk", chunks.kind)
    return journal


def _failed(journal: ForgetJournal, ids: list[str]) -> None:
    with contextlib.suppress(OSError), journal.forgetting("chunk", ids):
        raise OSError("disk full")


def test_a_completed_forget_leaves_no_row_and_a_failed_one_does(tmp_path: Path) -> None:
    journal = _journal(tmp_path / "db", Chunks(set()))
    with journal.forgetting("chunk", ["a", "b"]):
        assert {i for _, i, _ in journal.pending()} == {"a", "b"}  # written before the first step
    assert not journal.pending()
    _failed(journal, ["c"])
    assert [i for _, i, _ in journal.pending()] == ["c"]
    journal.close()


def test_gone_ids_are_run_again_by_any_handle_and_resolving_ones_are_not(tmp_path: Path) -> None:
    chunks = Chunks({"back"})
    a, b = _journal(tmp_path / "db", Chunks(set())), _journal(tmp_path / "db", chunks)
    _failed(a, ["gone", "back"])
    assert b.recover() == 1 and chunks.reruns == [["gone"]]
    # "back" resolves: not run again; a's row stays while a (alive, this process) may still be
    # forgetting it, and a itself drops it once its forget is no longer in flight
    assert [i for _, i, _ in b.pending()] == ["back"]
    a.register("chunk", chunks.kind)
    with a.forgetting("chunk", ["back"], keep=True):
        assert a.recover(force=True) == 0 and a.pending()  # in flight: kept
    assert a.recover(force=True) == 0 and not a.pending()
    assert a.counts.resolved_again == 1 and b.counts.rerun == 1
    a.close()
    b.close()


WRITER = """
import contextlib, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from percache_plugin.forget_journal import ForgetJournal
journal = ForgetJournal(Path(sys.argv[1]))
with contextlib.suppress(OSError), journal.forgetting("chunk", ["back", "gone"]):
    raise OSError("killed")
"""


@pytest.mark.parametrize("resolves", [True, False])
def test_the_rows_of_a_dead_process_are_settled(tmp_path: Path, resolves: bool) -> None:
    subprocess.run([sys.executable, "-c", WRITER.format(repo=str(REPO)), str(tmp_path / "db")], check=True)
    chunks = Chunks({"back"} if resolves else set())
    journal = _journal(tmp_path / "db", chunks)
    assert journal.recover() == (1 if resolves else 2)
    assert chunks.reruns == [["gone"] if resolves else ["back", "gone"]]
    assert not journal.pending()
    journal.close()


def test_rows_of_a_kind_nobody_registered_stay(tmp_path: Path) -> None:
    journal = ForgetJournal(tmp_path / "db")
    with contextlib.suppress(OSError), journal.forgetting("fact", ["f"]):
        raise OSError("locked")
    assert journal.recover() == 0 and [(k, i) for k, i, _ in journal.pending()] == [("fact", "f")]
    journal.close()
