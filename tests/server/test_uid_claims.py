"""Two deployments on one host with overlapping ``--sandbox-uids`` (issue 28, finding 7): the second server
refuses to start while the first runs or while anything still runs as a uid both ranges hold."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from danlu.core.errors import Conflict
from danlu.server import uid_claims
from danlu.server.lease import DataDirLock
from tests.cli.test_contract import DANLU
from tests.conftest import free_port, sandbox_folder, wait_for

A_FIRST, A_LAST = 2_950_000, 2_950_099  # above every worker's range (conftest.worker_uid_first), below 3,000,000


def test_an_overlapping_range_is_refused_while_the_other_server_runs(tmp_path: Path) -> None:
    reg, a, b = tmp_path / "reg.json", tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    lock = DataDirLock(a)
    lock.acquire()  # a's server is running
    try:
        uid_claims.claim(a, A_FIRST, A_LAST, reg)
        with pytest.raises(Conflict) as refused:
            uid_claims.claim(b, A_LAST, A_LAST + 100, reg)  # one uid in common is one too many
        assert refused.value.code == "sandbox_uids_overlap"
        assert f"{A_FIRST}-{A_LAST}" in refused.value.message and str(a) in refused.value.message
        assert "its server is running" in refused.value.message
        uid_claims.claim(b, A_LAST + 1, A_LAST + 100, reg)  # disjoint: fine
        uid_claims.claim(a, A_FIRST, A_LAST, reg)  # a server claims its own range again at every start
    finally:
        lock.release()
    # a is stopped and nothing runs as its uids: its claim is stale, the range may be reused
    uid_claims.claim(b, A_FIRST, A_LAST + 100, reg)
    claims = {c["data_dir"]: (c["first"], c["last"]) for c in json.loads(reg.read_text())["claims"]}
    assert claims == {str(b.resolve()): (A_FIRST, A_LAST + 100)}
    assert oct(reg.stat().st_mode & 0o777) == "0o600"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run a process as another uid")
def test_a_stopped_servers_rentals_still_running_keep_its_range(tmp_path: Path) -> None:
    """A restart keeps rentals, so a stopped server's renters may still run: their uids stay claimed."""
    reg, a, b = tmp_path / "reg.json", tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    uid_claims.claim(a, A_FIRST, A_LAST, reg)
    renter = subprocess.Popen(["sleep", "60"], user=A_FIRST + 7, group=A_FIRST + 7)
    try:
        with pytest.raises(Conflict) as refused:
            uid_claims.claim(b, A_FIRST, A_LAST, reg)
        assert f"its rentals still run as uids {A_FIRST + 7}" in refused.value.message
    finally:
        renter.kill()
        renter.wait()
    uid_claims.claim(b, A_FIRST, A_LAST, reg)  # nothing runs as them now
    a.rmdir()  # a deployment that is gone leaves no claim behind either
    uid_claims.claim(b, A_FIRST, A_LAST, reg)


def test_a_second_danlu_server_with_an_overlapping_range_starts_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "DANLU_UID_REGISTRY": str(tmp_path / "reg.json")}

    def server(name: str, uids: str, port: int) -> subprocess.Popen[str]:
        argv = [*DANLU, "server", "--data-dir", str(tmp_path / name), "--port", str(port), "--simulate-gpus", "T4:1"]
        argv += ["--sandbox-dir", str(sandbox_folder()), "--sandbox-uids", uids]
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    port_a = free_port()
    first = server("a", f"{A_FIRST}-{A_LAST}", port_a)
    try:

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port_a}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert first.poll() is None, first.communicate()[0]
                return False

        wait_for(up, timeout=60)
        port_b = free_port()
        second = server("b", f"{A_FIRST + 50}-{A_LAST + 50}", port_b)
        try:
            out, _ = second.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            second.kill()
            pytest.fail(f"the second server started on overlapping uids: {second.communicate()[0][-2000:]}")
        assert second.returncode != 0, out
        assert "sandbox_uids_overlap" in out or "overlaps" in out, out
        assert f"{A_FIRST}-{A_LAST}" in out and str(tmp_path / "a") in out, out
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port_b}/healthz", timeout=2)  # nothing listens
    finally:
        first.terminate()
        first.wait(timeout=30)
