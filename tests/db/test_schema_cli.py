"""``danlu admin db current|upgrade|downgrade`` (issue 28) on SQLite and PostgreSQL: a database
with a platform's rows goes down (after a backup) and up again to the models' schema with its rows;
what cannot be done is refused before anything is written; never while a server runs on it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import InvalidInput
from danlu.db import schema
from danlu.db.models import CONTROL_LOOP_LEASE, Base
from danlu.db.schema import head_revision
from danlu.server.lease import Lease

DANLU = [sys.executable, "-m", "danlu.cli.main", "admin", "db"]
pytestmark = pytest.mark.slow(seconds=60)  # a dozen CLI processes and migrations: start it early under xdist


def db_cmd(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DANLU, *args, "--db", url], capture_output=True, text=True, timeout=120)


def test_down_after_a_backup_and_up_again_keeps_the_rows(platform: Platform, tmp_path: Path) -> None:
    url, head = platform.db.url, head_revision(platform.db.url)
    platform.db.engine.dispose()
    with platform.db.engine.connect() as c:
        users = c.execute(text("SELECT id, name FROM users ORDER BY id")).all()
    r = db_cmd(url, "current", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"current": head, "head": head, "up_to_date": True}, r
    for revision, code in (("0007", "downgrade_not_possible"), ("nope", "unknown_revision"), (head, "not_a_downgrade")):
        with pytest.raises(InvalidInput) as err:
            schema.check_downgrade(platform.db, revision)
        assert err.value.code == code
    r = db_cmd(url, "downgrade", "0007", "--backup", str(tmp_path / "a"))
    assert r.returncode == 2 and "error [downgrade_not_possible]" in r.stderr, r.stderr
    assert not (tmp_path / "a").exists()  # refused before the backup
    r = db_cmd(url, "downgrade", "0015", "--backup", str(tmp_path / "before-0015.backup"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "before-0015.backup").stat().st_mode & 0o777 == 0o600
    assert json.loads(db_cmd(url, "current", "--json").stdout) == {"current": "0015", "head": head, "up_to_date": False}
    with platform.db.engine.connect() as c:
        assert not inspect(c).has_table("ssh_keys")  # 0017's table is gone
    with pytest.raises(InvalidInput) as err:
        schema.check_downgrade(platform.db, "0009")
    assert err.value.code == "downgrade_needs_head"
    r = db_cmd(url, "upgrade")
    assert r.returncode == 0 and f"0015 → {head}" in r.stdout, r.stderr
    platform.db.engine.dispose()
    with platform.db.engine.connect() as c:
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []
        assert c.execute(text("SELECT id, name FROM users ORDER BY id")).all() == users


def test_never_while_a_server_runs_on_the_database(platform: Platform, fake_clock: FakeClock, tmp_path: Path) -> None:
    fake_clock.set(int(time.time() * 1000))  # the commands read the real clock
    lease = Lease(platform.db, fake_clock, CONTROL_LOOP_LEASE, "gpu-7:/var/lib/danlu", ttl_ms=600_000)
    assert lease.acquire()  # a server elsewhere works on this database
    platform.db.engine.dispose()
    for args in (["upgrade"], ["downgrade", "0015", "--backup", str(tmp_path / "x")]):
        r = db_cmd(platform.db.url, *args)
        assert r.returncode == 2 and "error [server_running]" in r.stderr and "gpu-7:/var/lib/danlu" in r.stderr, (
            r.stderr
        )
    assert not (tmp_path / "x").exists()


def test_a_wrong_folder_or_an_unreachable_database_is_a_clear_error_and_makes_nothing(tmp_path: Path) -> None:
    """A newcomer ran `danlu admin db current` without --data-dir (make run keeps .danlu): a traceback."""
    base = [sys.executable, "-m", "danlu.cli.main", "admin"]
    for args in (["db", "current"], ["db", "upgrade"], ["backup", str(tmp_path / "b.backup")]):
        r = subprocess.run([*base, *args, "--data-dir", str(tmp_path / "none")], capture_output=True, text=True)
        assert r.returncode == 2 and "error [no_database]" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "none").exists() and not (tmp_path / "b.backup").exists()
    r = db_cmd("postgresql+psycopg://nobody:pw-123@127.0.0.1:1/x", "current")
    assert r.returncode == 2 and "error [database_unreachable]" in r.stderr and "pw-123" not in r.stderr, r.stderr
