"""The acceptance contract, end to end: `danlu server` as a real process, every CLI command as a
real process, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import WORKER_UIDS, end_runs, free_port, sandbox_folder, wait_for, worker_uid_first

DANLU = [sys.executable, "-m", "danlu.cli.main"]


class Cli:
    def __init__(self, url: str, token: str) -> None:
        self.env = {**os.environ, "DANLU_URL": url, "DANLU_TOKEN": token, "DANLU_CONFIG": "/nonexistent/danlu.json"}

    def __call__(self, *args: str, ok: bool = True, token: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if token:
            env["DANLU_TOKEN"] = token
        proc = subprocess.run([*DANLU, *args], env=env, capture_output=True, text=True, timeout=60)
        if ok:
            assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc

    def json(self, *args: str, token: str | None = None) -> object:
        return json.loads(self(*args, "--json", token=token).stdout) if "--" not in args else None


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with run_server(db_url, tmp_path) as up:
        yield up


@contextmanager
def run_server(db_url: str, tmp_path: Path, *extra: str) -> Iterator[tuple[str, Path]]:
    """`danlu server` as a real process on simulated GPUs, with a fast loop and ``extra`` flags."""
    port = free_port()
    data = tmp_path / "data"
    proc, url = start_server(db_url, tmp_path, port, *extra)
    try:
        yield url, data
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        end_server_runs(db_url, data)


def start_server(
    db_url: str, tmp_path: Path, port: int, *extra: str, sandbox_dir: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start `danlu server` on ``port`` (data in tmp_path/data, log appended to tmp_path/server.log, renters'
    folders in ``sandbox_dir`` or a new folder) and wait until it answers; returns the process and its URL.
    The caller stops it (and ends its runs). A restart must pass the first start's ``sandbox_dir``."""
    data = tmp_path / "data"
    with open(tmp_path / "server.log", "a") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [
                *DANLU,
                "server",
                "--db",
                db_url,
                "--port",
                str(port),
                "--data-dir",
                str(data),
                "--sandbox-dir",
                str(sandbox_dir or sandbox_folder()),
                "--simulate-gpus",
                "A100-80GB:2,T4:2",
                "--stop-grace",
                "2",
                "--tick",
                "0.2",
                "--meter-interval",
                "1",
                "--sandbox-uids",
                f"{worker_uid_first()}-{worker_uid_first() + WORKER_UIDS - 1}",
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            return False

    try:
        wait_for(up, timeout=60)
    except BaseException:
        proc.kill()
        proc.wait(timeout=20)
        raise
    return proc, url


def end_server_runs(db_url: str, data: Path) -> None:
    """A server's runs outlive it by design; a test's must not (a failed test left a busy loop
    spinning through the rest of a CI run once): kill every run its database still has."""
    from danlu.compute.sandbox.probe import make_local_backend
    from danlu.context import Platform, Settings
    from danlu.core.clock import SystemClock
    from danlu.db.engine import open_database

    db = open_database(db_url)
    try:
        backend, sandbox = make_local_backend(data)
        end_runs(
            Platform(db=db, clock=SystemClock(), backend=backend, settings=Settings(data_dir=data), sandbox=sandbox)
        )
    finally:
        db.engine.dispose()


def test_acceptance_contract(server: tuple[str, Path]) -> None:
    url, data = server
    token_file = data / "admin-token"
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    cli = Cli(url, token_file.read_text().strip())

    user = cli.json("admin", "user", "create", "alice")
    assert isinstance(user, dict) and user["name"] == "alice" and user["token"].startswith("dl_")
    alice = user["token"]
    cli("admin", "topup", "alice", "50.00")
    cli("admin", "price", "set", "A100-80GB", "36.00")
    cli("admin", "price", "set", "T4", "3.60")

    offers = cli.json("offers", token=alice)
    assert isinstance(offers, list)
    assert {
        o["gpu_model"]: (o["vram_gb"], o["free"], o["total"], o["price_per_hour"], o["simulated"]) for o in offers
    } == {
        "A100-80GB": (80, 2, 2, "36.00", True),
        "T4": (16, 2, 2, "3.60", True),
    }

    rented = json.loads(
        cli(
            "rent",
            "--gpu",
            "A100-80GB",
            "--count",
            "2",
            "--json",
            "--",
            "sh",
            "-c",
            "echo gpus=$CUDA_VISIBLE_DEVICES; sleep 60",
            token=alice,
        ).stdout
    )
    iid = rented["id"]
    assert rented["status"] == "running"

    denied = cli("rent", "--gpu", "A100-80GB", "--json", "--", "true", ok=False, token=alice)
    assert denied.returncode != 0 and "no_capacity" in denied.stderr and denied.stdout == ""

    def shown() -> dict[str, object]:
        v = json.loads(cli("show", iid, "--json", token=alice).stdout)
        assert {"id", "status", "gpu_model", "gpu_count", "billed_seconds", "cost", "exit_code"} <= v.keys()
        return v

    wait_for(lambda: int(shown()["billed_seconds"]) >= 2)  # type: ignore[call-overload]
    assert "gpus=0,1" in cli("logs", iid, token=alice).stdout
    cli("stop", iid, token=alice)
    wait_for(lambda: shown()["status"] == "stopped")
    cost_after_stop = shown()["cost"]
    time.sleep(1.2)
    assert shown()["cost"] == cost_after_stop
    cli("start", iid, token=alice)
    assert shown()["status"] == "running"
    cli("rm", iid, token=alice)
    assert shown()["status"] == "destroyed"  # `show` after `rm`: its record (issue 28, finding 11)
    assert cli("start", iid, ok=False, token=alice).returncode != 0

    bal = cli.json("balance", token=alice)
    assert isinstance(bal, dict) and bal["currency"] == "CNY"
    assert 0 < float(bal["balance"]) < 50.0

    quick = json.loads(cli("rent", "--gpu", "T4", "--json", "--", "sh", "-c", "exit 4", token=alice).stdout)
    wait_for(lambda: json.loads(cli("show", quick["id"], "--json", token=alice).stdout)["status"] == "exited")
    assert json.loads(cli("show", quick["id"], "--json", token=alice).stdout)["exit_code"] == 4
    follow = cli("rent", "--gpu", "T4", "--json", "--", "sh", "-c", "echo one; sleep 1; echo two", token=alice)
    followed = cli("logs", json.loads(follow.stdout)["id"], "-f", token=alice)  # returns when the command ends
    assert followed.stdout.split() == ["one", "two"]

    bad = cli("rent", "--gpu", "Z9000", "--", "true", ok=False, token=alice)
    assert bad.returncode != 0 and "unknown_gpu_model" in bad.stderr
