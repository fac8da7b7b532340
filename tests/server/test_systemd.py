"""``danlu admin systemd-unit`` (issue 28): a unit `systemd-analyze verify` accepts, that keeps
rentals running across `systemctl restart` (KillMode=process) and waits for /readyz after a start
(``danlu admin wait-ready``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LiveServer

DANLU = [sys.executable, "-m", "danlu.cli.main"]


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("systemd-analyze") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("systemd-analyze is missing (Debian's systemd package)")
        pytest.skip("no systemd-analyze here")
    return subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)


def test_the_unit_verifies_and_keeps_rentals_across_a_restart(tmp_path: Path) -> None:
    config = tmp_path / "etc danlu" / "50% danlu.toml"  # a space and a % to quote
    r = subprocess.run([*DANLU, "admin", "systemd-unit", "--config", str(config)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    unit = tmp_path / "danlu.service"
    unit.write_text(r.stdout)
    checked = _verify(unit)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked
    lines = r.stdout.splitlines()
    assert "KillMode=process" in lines and "Delegate=yes" in lines and "Restart=on-failure" in lines
    [start] = [line for line in lines if line.startswith("ExecStart=")]
    assert start.endswith(f' server --config "{str(config).replace("%", "%%")}"'), start
    assert not [line for line in lines if "token" in line.lower() or "postgresql://" in line or "--db" in line]
    # The check is not vacuous: a unit systemd cannot run is refused.
    unit.write_text(r.stdout.replace(start, "ExecStart=/nonexistent/danlu server"))
    assert _verify(unit).returncode != 0


def test_wait_ready_waits_for_readyz_and_says_what_is_not_ready(live: LiveServer) -> None:
    r = subprocess.run([*DANLU, "admin", "wait-ready", "--url", live.url, "--timeout", "60"], capture_output=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [*DANLU, "admin", "wait-ready", "--url", "http://127.0.0.1:9", "--timeout", "1"], capture_output=True, text=True
    )
    assert r.returncode == 1 and "is not ready after 1 s: no answer" in r.stderr, r.stderr
