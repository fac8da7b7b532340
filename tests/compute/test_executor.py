"""The local executor with real processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from danlu.compute.executor import LaunchSpec, LocalExecutor, ProcessRef
from tests.conftest import wait_for


def spec(tmp_path: Path, *command: str, env: dict[str, str] | None = None) -> LaunchSpec:
    return LaunchSpec(list(command), tmp_path / "ws", tmp_path / "run", env or {})


def test_runs_in_its_workspace_with_the_given_gpus_and_records_exit(tmp_path: Path) -> None:
    ex = LocalExecutor()
    before = time.time_ns() // 1_000_000
    ref = ex.launch(
        spec(
            tmp_path, "sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES"; pwd; exit 7', env={"CUDA_VISIBLE_DEVICES": "2,3"}
        )
    )
    wait_for(lambda: not ex.alive(ref))
    info = ex.exit_info(tmp_path / "run")
    assert info is not None and info.code == 7
    # File times come from the kernel's coarse clock (a jiffy behind time_ns at most).
    assert before - 20 <= info.ended_ms <= time.time_ns() // 1_000_000
    log = (tmp_path / "run" / "output.log").read_text()
    assert "gpus=2,3" in log and str(tmp_path / "ws") in log


def test_own_process_group_and_sigterm_status(tmp_path: Path) -> None:
    ex = LocalExecutor()
    ref = ex.launch(spec(tmp_path, "sh", "-c", "echo started; exec sleep 60"))
    assert ex.alive(ref)
    assert os.getpgid(ref.pid) == ref.pid  # the wrapper leads its own group
    # A SIGTERM sent before the command exists reaches only the wrapper (the loop's SIGKILL after
    # the grace period covers that); here we test the normal case of a running command.
    wait_for(lambda: "started" in (tmp_path / "run" / "output.log").read_text())
    ex.signal_group(ref, signal.SIGTERM)
    wait_for(lambda: not ex.alive(ref))
    info = ex.exit_info(tmp_path / "run")
    assert info is not None and info.code == 128 + signal.SIGTERM


def test_sigkill_leaves_no_exit_status(tmp_path: Path) -> None:
    ex = LocalExecutor()
    ref = ex.launch(spec(tmp_path, "sleep", "60"))
    ex.signal_group(ref, signal.SIGKILL)
    wait_for(lambda: not ex.alive(ref))
    assert ex.exit_info(tmp_path / "run") is None


def test_a_recycled_pid_is_not_mistaken_for_the_process(tmp_path: Path) -> None:
    ex = LocalExecutor()
    ref = ex.launch(spec(tmp_path, "sleep", "60"))
    try:
        assert not ex.alive(ProcessRef(ref.pid, ref.start_ticks + 1))
        assert not ex.alive(ProcessRef(2**22 + 12345, 1))
    finally:
        ex.signal_group(ref, signal.SIGKILL)


def test_missing_command_exits_127(tmp_path: Path) -> None:
    ex = LocalExecutor()
    ref = ex.launch(spec(tmp_path, "definitely-not-a-command-xyz"))
    wait_for(lambda: not ex.alive(ref))
    info = ex.exit_info(tmp_path / "run")
    assert info is not None and info.code == 127
