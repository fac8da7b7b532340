"""Two servers on one database never both do the background work; two on one data folder never
both run; a server restarted after kill -9 takes its work back at once (issue 8)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import Conflict
from danlu.server.lease import DataDirLock, Lease
from danlu.server.loop import ControlLoop


def test_a_lease_is_held_by_one_server_until_released_or_expired(platform: Platform, fake_clock: FakeClock) -> None:
    a = Lease(platform.db, fake_clock, "control-loop", "host-a:/data", ttl_ms=10_000)
    b = Lease(platform.db, fake_clock, "control-loop", "host-b:/data", ttl_ms=10_000)
    assert a.acquire()
    assert not b.acquire()
    fake_clock.advance(seconds=5)
    assert a.acquire()  # renewed: now expires 10 s from here
    fake_clock.advance(seconds=9)
    assert not b.acquire()
    fake_clock.advance(seconds=2)  # a stopped renewing (hung or dead): b takes over
    assert b.acquire()
    assert not a.acquire()
    b.release()
    assert a.acquire()


def test_the_same_server_restarted_takes_its_lease_back_at_once(platform: Platform, fake_clock: FakeClock) -> None:
    before = Lease(platform.db, fake_clock, "control-loop", "host-a:/data", ttl_ms=60_000)
    assert before.acquire()
    after_restart = Lease(platform.db, fake_clock, "control-loop", "host-a:/data", ttl_ms=60_000)
    assert after_restart.acquire()  # same host and data folder: no waiting out the old lease


def test_only_the_lease_holder_runs_the_control_loop(platform: Platform, tmp_path: Path) -> None:
    from dataclasses import replace

    other_dir = tmp_path / "other-server"
    other_dir.mkdir()
    other = Platform(
        db=platform.db,
        clock=platform.clock,
        backend=platform.backend,
        settings=replace(platform.settings, data_dir=other_dir),
        sandbox=platform.sandbox,
    )
    first, second = ControlLoop(platform), ControlLoop(other)
    first.run_once()
    second.run_once()
    assert (first.ticks, second.ticks) == (1, 0)  # the second did no work


def test_a_second_server_on_one_data_folder_refuses_to_start(tmp_path: Path) -> None:
    first = DataDirLock(tmp_path)
    first.acquire()
    with pytest.raises(Conflict) as exc:
        DataDirLock(tmp_path).acquire()
    assert exc.value.code == "data_dir_in_use" and f"pid {os.getpid()}" in exc.value.message
    first.release()
    again = DataDirLock(tmp_path)
    again.acquire()
    again.release()


def test_the_data_folder_lock_dies_with_its_server(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from danlu.server.lease import DataDirLock;"
            "lock = DataDirLock(Path(sys.argv[1])); lock.acquire(); print('held', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    with pytest.raises(Conflict):
        DataDirLock(tmp_path).acquire()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    time.sleep(0.05)
    lock = DataDirLock(tmp_path)
    lock.acquire()  # kill -9 released it: a restart never waits
    lock.release()
