"""``danlu admin backup`` / ``restore`` (issue 28): a backup taken while the server meters restores
into a fresh database and data folder with books identical to the source's at that moment (every
transaction whole, every balance its entries' sum), on SQLite and PostgreSQL and across them; bad
targets and files are refused and change nothing."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from danlu.core.errors import InvalidInput
from danlu.db import backup as bk
from danlu.db.engine import open_database
from tests.conftest import LiveServer, fresh_pg_schema, wait_for

DANLU = [sys.executable, "-m", "danlu.cli.main"]
pytestmark = pytest.mark.slow(seconds=60)


def books(url: str) -> dict[str, Any]:
    """Every ledger row, usage record and balance, by id."""
    db = open_database(url)
    try:
        with db.engine.connect() as c:
            q = lambda sql: [tuple(r) for r in c.execute(text(sql))]  # noqa: E731
            return {
                "transactions": q(
                    "SELECT id, idempotency_key, kind, memo, created_at_ms FROM ledger_transactions ORDER BY id"
                ),
                "entries": q("SELECT id, transaction_id, account_id, amount_minor FROM ledger_entries ORDER BY id"),
                "usage": q("SELECT * FROM usage_records ORDER BY id"),
                "balances": q("SELECT id, kind, ref, balance_minor FROM accounts ORDER BY id"),
                "sums": q(
                    "SELECT t.id, SUM(e.amount_minor) FROM ledger_transactions t JOIN ledger_entries e "
                    "ON e.transaction_id = t.id GROUP BY t.id HAVING SUM(e.amount_minor) <> 0"
                ),
                "projection": q(
                    "SELECT a.id FROM accounts a LEFT JOIN ledger_entries e ON e.account_id = a.id "
                    "GROUP BY a.id, a.balance_minor HAVING a.balance_minor <> COALESCE(SUM(e.amount_minor), 0)"
                ),
            }
    finally:
        db.engine.dispose()


@contextlib.contextmanager
def empty_target(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'restored.db'}"
    else:
        with fresh_pg_schema() as url:
            yield url


@pytest.mark.parametrize("target", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_backup_taken_while_metering_restores_identical_books(live: LiveServer, tmp_path: Path, target: str) -> None:
    p = live.platform
    with live.new_user("bea") as c:
        for _ in range(2):
            r = c.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "600"]})
            assert r.status_code == 201, r.text
        usage = lambda: books(p.db.url)["usage"]  # noqa: E731
        wait_for(lambda: len(usage()) >= 4, timeout=60)  # the meter posts every second
        data = p.settings.data_dir
        out = tmp_path / "danlu.backup"
        argv = [*DANLU, "admin", "backup", str(out), "--db", p.db.url, "--data-dir", str(data), "--json"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)  # the meter keeps posting meanwhile
        assert r.returncode == 0, r.stderr
        made = json.loads(r.stdout)
        assert made["format"] == "danlu-backup/1" and made["rows"]["ledger_entries"] > 0
        assert out.stat().st_mode & 0o777 == 0o600
        n = len(usage())
        wait_for(lambda: len(usage()) > n + 2, timeout=60)  # metering went on after the backup
        source = books(p.db.url)
        with empty_target(target, tmp_path) as url:
            folder = tmp_path / "restored-data"
            argv = [*DANLU, "admin", "restore", str(out), "--db", url, "--data-dir", str(folder)]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            restored = books(url)
            assert restored["sums"] == [] and restored["projection"] == []  # balanced, balances = entries
            k, u = len(restored["transactions"]), len(restored["usage"])
            assert 0 < u < len(source["usage"])  # a snapshot of that moment, not of now
            assert 0 < k <= len(source["transactions"])  # (the meter's postings may be fewer than its records)
            assert restored["transactions"] == source["transactions"][:k]  # a prefix: every one whole
            ids = {t[0] for t in restored["transactions"]}
            assert restored["entries"] == [e for e in source["entries"] if e[1] in ids]
            assert (
                len(restored["usage"]) == made["rows"]["usage_records"]
                and restored["usage"] == source["usage"][: len(restored["usage"])]
            )
            assert (folder / "admin-token").read_text() == (data / "admin-token").read_text()
            assert (folder / "admin-token").stat().st_mode & 0o777 == 0o600
            if target == "sqlite":
                assert (tmp_path / "restored.db").stat().st_mode & 0o077 == 0  # the books are private
            # The restored database takes new rows after the restored ones (PostgreSQL's sequences moved on).
            db = open_database(url)
            try:
                with db.engine.begin() as conn:
                    top = conn.execute(text("SELECT MAX(id) FROM ledger_transactions")).scalar_one()
                    conn.execute(
                        text(
                            "INSERT INTO ledger_transactions (idempotency_key, kind, memo, created_at_ms) "
                            "VALUES ('after-restore', 'topup', '', 1)"
                        )
                    )
                    assert conn.execute(text("SELECT MAX(id) FROM ledger_transactions")).scalar_one() == top + 1
            finally:
                db.engine.dispose()
            # A second restore into the same target is refused and changes nothing.
            r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and "restore_target_not_empty" in r.stderr, r.stderr
        r = subprocess.run(
            [*DANLU, "admin", "backup", str(out), "--db", p.db.url, "--data-dir", str(data)],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 2 and "backup_exists" in r.stderr  # never overwritten


def test_what_is_not_a_backup_of_this_schema_is_refused(platform: Any, tmp_path: Path) -> None:
    out = tmp_path / "b.backup"
    bk.backup(platform.db, platform.settings.data_dir, out, 1)
    bogus = tmp_path / "not-a-backup"
    bogus.write_text("hello")
    for path, code in ((bogus, "invalid_backup"), (tmp_path / "missing", "backup_not_found")):
        with pytest.raises(InvalidInput) as err:
            bk.restore(open_database(f"sqlite:///{tmp_path / 'x.db'}"), tmp_path / "x", path)
        assert err.value.code == code
    with sqlite3.connect(out) as raw:
        raw.execute("UPDATE danlu_backup SET value = '\"0001_old\"' WHERE key = 'revision'")
    with pytest.raises(InvalidInput) as err:
        bk.restore(open_database(f"sqlite:///{tmp_path / 'y.db'}"), tmp_path / "y", out)
    assert err.value.code == "backup_schema_mismatch" and "0001_old" in err.value.message
    assert not os.path.exists(tmp_path / "y" / "admin-token")
