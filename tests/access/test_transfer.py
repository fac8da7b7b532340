"""Files of a stopped rental (danlu.access.transfer): ``danlu cp`` and the files API work on a stopped instance
through a transfer sandbox (no GPU, not billed), only the platform's own file commands run there (a stopped
rental is not free compute), starting the rental ends it first, and it ends by itself when idle."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from danlu.access import transfer
from tests.access.session_client import Session
from tests.access.test_copy import cp
from tests.access.test_sessions import token_of
from tests.conftest import LiveServer, wait_for
from tests.sandbox.conftest import log_of, rent, sbx  # noqa: F401 - the sandboxed live server

pytestmark = [pytest.mark.slow(seconds=60), pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)]


@pytest.fixture
def stopped(sbx: LiveServer) -> Iterator[tuple[httpx.Client, str]]:  # noqa: F811
    with sbx.new_user("sam") as c:
        iid = rent(c, ["sh", "-c", "echo kept > note; echo ready; exec sleep 3000"])
        wait_for(lambda: "ready" in log_of(c, iid))
        assert c.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: c.get(f"/instances/{iid}").json()["status"] == "stopped")
        yield c, iid


def _transfers(sbx: LiveServer) -> transfer.Transfers:  # noqa: F811
    return sbx.server.config.app.state.transfers  # type: ignore[no-any-return]


def test_files_move_in_and_out_of_a_stopped_rental_without_gpus_or_billing(
    sbx: LiveServer,  # noqa: F811
    stopped: tuple[httpx.Client, str],
    tmp_path: Path,
) -> None:
    c, iid = stopped
    billed = c.get(f"/instances/{iid}").json()["billed_seconds"]
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "data.bin").write_bytes(os.urandom(1 << 20))
    up = cp(sbx, c, str(tmp_path / "up"), f"{iid}:inputs", "--json")
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["sha256_verified"] is True
    down = cp(sbx, c, f"{iid}:note", str(tmp_path / "note"))
    assert down.returncode == 0, down.stderr
    resumable = cp(sbx, c, "--resumable", "--json", str(tmp_path / "up" / "data.bin"), f"{iid}:inputs/again.bin")
    assert resumable.returncode == 0 and json.loads(resumable.stdout)["sha256_verified"], resumable.stderr
    assert (tmp_path / "note").read_text() == "kept\n"
    got = c.get(f"/instances/{iid}/files", params={"path": "inputs/data.bin"})
    assert got.status_code == 200 and got.content == (tmp_path / "up" / "data.bin").read_bytes()
    assert c.put(f"/instances/{iid}/files", params={"path": "later.txt"}, content=b"x").status_code == 200
    view = c.get(f"/instances/{iid}").json()
    assert view["status"] == "stopped" and view["billed_seconds"] == billed  # no GPU time
    assert _transfers(sbx).count() == 1  # one sandbox for all of it
    [box] = _transfers(sbx)._boxes.values()
    init = json.loads(box.handle)["init"]
    inside = os.listdir(f"/proc/{init}/root/dev")
    assert not [d for d in inside if d.startswith("nvidia")], inside  # no GPU in it
    assert (sbx.platform.workspaces / iid / "later.txt").read_bytes() == b"x"  # the rental's own workspace


def test_only_file_commands_run_in_a_stopped_rental_and_a_start_ends_its_transfer_sandbox(
    sbx: LiveServer,  # noqa: F811
    stopped: tuple[httpx.Client, str],
) -> None:
    c, iid = stopped
    shell = Session(sbx, token_of(c), iid, ["sh", "-c", "yes > /dev/null"])  # free compute: no
    shell.eof()
    assert shell.finish()["error"]["code"] == "instance_not_running"
    assert _transfers(sbx).count() == 0
    assert c.get(f"/instances/{iid}/entries").status_code == 200  # a file command: yes
    assert _transfers(sbx).count() == 1
    with sbx.new_user("other") as o:
        assert o.get(f"/instances/{iid}/entries").status_code == 404
    started = c.post(f"/instances/{iid}/start")
    assert started.status_code == 200, started.text
    assert _transfers(sbx).count() == 0  # ended before the rental's own sandbox took the workspace
    wait_for(lambda: log_of(c, iid).count("ready") == 2)


def test_an_idle_transfer_sandbox_ends_by_itself(
    sbx: LiveServer,  # noqa: F811
    stopped: tuple[httpx.Client, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c, iid = stopped
    monkeypatch.setattr(transfer, "IDLE_S", 0.0)
    assert c.get(f"/instances/{iid}/entries").status_code == 200
    [box] = _transfers(sbx)._boxes.values()
    init = json.loads(box.handle)["init"]
    wait_for(lambda: _transfers(sbx).count() == 0 and not os.path.exists(f"/proc/{init}"), timeout=60)
