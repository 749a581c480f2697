"""Deleting a session's block tags costs what its own tags cost, not what every session's do:
with a long conversation (a session at its token budget tags every block after an evicted turn
again, so its tags grow with its turns) a delete or reset compared each of its tags with every
tag of the fingerprint, holding the handle's locks (20 s for 10k tags among 20k)."""

from __future__ import annotations

from pathlib import Path

from percache_plugin.session.block_tags import BlockTags
from percache_plugin.session.schema import BLOCKS_SCHEMA
from percache_plugin.sqlite_tx import connect

PER_SESSION = 40


def _steps(tmp_path: Path, others: int) -> int:
    """SQLite VM steps (in thousands) of drop_session on a database holding ``others`` other
    sessions' tags besides the dropped session's."""
    db = connect(tmp_path / f"tags-{others}.sqlite", BLOCKS_SCHEMA)
    tags = BlockTags(db)
    for s in range(others):
        tags.tag("fp", f"other-{s}", [(f"o{s}-{b}", []) for b in range(PER_SESSION)])
    tags.tag("fp", "s", [(f"s-{b}", []) for b in range(PER_SESSION)])
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    db.set_progress_handler(count, 1000)
    tags.drop_session("s", lambda fp: None)
    db.set_progress_handler(None, 0)
    assert db.execute("SELECT COUNT(*) FROM chat_blocks WHERE name = 's'").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM chat_blocks").fetchone()[0] == others * PER_SESSION
    db.close()
    return steps[0]


def test_dropping_a_sessions_tags_does_not_scan_the_other_sessions_tags(tmp_path: Path) -> None:
    few = _steps(tmp_path, 10)
    many = _steps(tmp_path, 160)  # 16 times the other tags
    assert many <= few + 2, (few, many)
