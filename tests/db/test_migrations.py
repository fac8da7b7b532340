"""Migrations and models agree, on SQLite and PostgreSQL; 0006 carries runs started before the
upgrade over to run handles the local backend still adopts."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from danlu.compute.sandbox.probe import make_local_backend
from danlu.db.engine import alembic_config, migrate, open_database
from danlu.db.models import Base


def test_the_migrated_schema_is_the_models_schema(db_url: str) -> None:
    db = open_database(db_url)
    migrate(db)
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    db.engine.dispose()
    assert diff == [], diff


def test_0006_turns_a_running_pid_into_a_handle_that_is_adopted(db_url: str, tmp_path: Path) -> None:
    db = open_database(db_url)
    cfg = alembic_config(db_url)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0005")
    data = tmp_path / "data"
    (data / "runs" / "i-old").mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a run started by the old server
    try:
        ticks = int(Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        with db.engine.begin() as conn:
            conn.execute(text("INSERT INTO users (id, name, token_hash, is_admin, credit_limit_minor, created_at_ms) "
                              "VALUES (1, 'old', 'x', false, 0, 0)"))  # fmt: skip
            conn.execute(
                text(
                    "INSERT INTO instances (id, user_id, name, status, status_reason, gpu_model, gpu_count, "
                    "command_json, workspace, pid, proc_start_ticks, created_at_ms, updated_at_ms, interruptible) "
                    "VALUES ('i-old', 1, '', 'running', '', 'T4', 1, '[]', '/w', :pid, :ticks, 0, 0, false)"
                ),
                {"pid": proc.pid, "ticks": ticks},
            )
        migrate(db)
        with db.engine.connect() as conn:
            handle = conn.execute(text("SELECT run_handle FROM instances WHERE id = 'i-old'")).scalar_one()
        assert json.loads(handle) == {"pid": proc.pid, "ticks": ticks, "exit": "runs/i-old/exit", "log": "i-old",
                                      "run": "i-old"}  # fmt: skip
        backend, _ = make_local_backend(data)
        assert backend.poll([handle])[handle].kind == "running"  # adopted: the same process
        proc.kill()
        proc.wait()
        (data / "runs" / "i-old" / "exit").write_text("0\n")
        os.utime(data / "runs" / "i-old" / "exit", ns=(time.time_ns(), time.time_ns()))
        state = backend.poll([handle])[handle]
        assert (state.kind, state.code) == ("exited", 0)
    finally:
        proc.kill()
        db.engine.dispose()
