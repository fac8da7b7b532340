"""Renters' workspaces and job folders live in the sandbox folder, so a restart on another one would lose
them: every run in flight failed with "bwrap: Can't find source path …/workspace" and queued jobs burned
their attempts (found by the demotion drill of issue 11). The folder is kept per host and data folder,
like the currency and the time zone; a restart that names another one is refused, unless the recorded
folder is gone (it was moved)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from danlu.compute.gpus import parse_simulated_spec
from danlu.core.errors import DanluError
from danlu.db.engine import open_database
from danlu.db.models import Setting
from danlu.server.bootstrap import bootstrap


def _boot(db_url: str, data: Path, renters: Path) -> None:
    db = open_database(db_url)
    try:
        bootstrap(db, data, "CNY", parse_simulated_spec("T4:1", "local"), 0, sandbox_dir=renters)
    finally:
        db.engine.dispose()


def _recorded(db_url: str) -> list[str]:
    db = open_database(db_url)
    try:
        with db.read() as s:
            return [r.value for r in s.query(Setting).filter(Setting.key.like("sandbox_dir@%"))]
    finally:
        db.engine.dispose()


def test_a_restart_on_another_sandbox_folder_is_refused_and_changes_nothing(db_url: str, tmp_path: Path) -> None:
    data, first, other = tmp_path / "data", tmp_path / "renters", tmp_path / "elsewhere"
    _boot(db_url, data, first)
    assert _recorded(db_url) == [str(first.resolve())]
    _boot(db_url, data, first)  # the same folder again: fine

    with pytest.raises(DanluError) as exc:
        _boot(db_url, data, other)
    assert exc.value.code == "sandbox_dir_locked"
    assert str(first.resolve()) in exc.value.message and "--sandbox-dir" in exc.value.message
    assert not other.exists()  # refused before anything was created there
    assert _recorded(db_url) == [str(first.resolve())]

    # the operator moved the folder: the old one is gone, the new one is taken and recorded
    shutil.move(str(first), str(other))
    _boot(db_url, data, other)
    assert _recorded(db_url) == [str(other.resolve())]
