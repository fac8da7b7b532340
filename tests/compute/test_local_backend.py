"""The local backend with real processes, sandboxed (bubblewrap) and plain (--no-sandbox): the
two-phase launch, exit status and time, signals, lost runs, and recycled pids."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from danlu.backend import Limits, RunSpec, RunUsage
from danlu.compute.backends.local import LocalBackend
from danlu.compute.sandbox.netstat import parse_net_dev
from danlu.compute.sandbox.probe import make_local_backend
from tests.conftest import require_sandbox, sandbox_folder, wait_for, worker_uid_first

LIMITS = Limits(cpus_milli=1000, memory_bytes=512 << 20, pids=64, disk_bytes=256 << 20)


@pytest.fixture
def root() -> Path:
    """Where the runs' workspaces live: reachable by the renter's uid, as in production."""
    return sandbox_folder()


@pytest.fixture(params=["sandbox", "plain"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalBackend]:
    if request.param == "sandbox":
        require_sandbox()
        b, status = make_local_backend(tmp_path / "data", network="none")
        assert status.sandboxed
    else:
        b, _ = make_local_backend(tmp_path / "data", no_sandbox=True)
    yield b


# One run id and renter uid per test process: under pytest-xdist, tests of this file run at once in
# other workers, and a shared id or uid would share a cgroup or let one kill the other's processes.
RUN_ID = f"i-test{os.getpid()}"
UID = worker_uid_first() + 123


def spec(root: Path, *command: str, env: dict[str, str] | None = None, run_id: str = RUN_ID) -> RunSpec:
    control = root / "control" / run_id
    control.mkdir(parents=True, exist_ok=True)
    os.chmod(control, 0o755)
    return RunSpec(run_id, run_id, list(command), env or {}, root / "ws" / run_id, control, limits=LIMITS, uid=UID)


def output(b: LocalBackend, key: str = RUN_ID) -> str:
    return b.read_output(key, 0)[0]


def run(b: LocalBackend, s: RunSpec) -> str:
    handle = b.launch(s)
    b.start(handle)
    return handle


def test_runs_in_its_workspace_with_its_env_and_records_exit_code_and_time(backend: LocalBackend, root: Path) -> None:
    before = time.time_ns() // 1_000_000
    handle = run(
        backend,
        spec(root, "sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES"; pwd; exit 7', env={"CUDA_VISIBLE_DEVICES": "2,3"}),
    )
    state = wait_for(lambda: (st := backend.poll([handle])[handle]).kind != "running" and st)
    assert state.kind == "exited" and state.code == 7
    # File times come from the kernel's coarse clock (a jiffy behind time_ns at most).
    assert state.ended_ms is not None and before - 20 <= state.ended_ms <= time.time_ns() // 1_000_000
    text = output(backend)
    workspace = "/workspace" if backend.sandbox else str(root / "ws" / RUN_ID)
    assert "gpus=2,3" in text and workspace in text


def test_the_command_waits_for_start(backend: LocalBackend, root: Path) -> None:
    handle = backend.launch(spec(root, "sh", "-c", "echo ran"))
    time.sleep(0.5)
    assert output(backend) == "" and backend.poll([handle])[handle].kind == "running"
    backend.start(handle)
    wait_for(lambda: "ran" in output(backend))


def test_terminate_reaches_the_command_and_its_exit_status_is_kept(backend: LocalBackend, root: Path) -> None:
    handle = run(
        backend, spec(root, "sh", "-c", "trap 'echo got TERM; exit 3' TERM; echo started; while :; do sleep 0.1; done")
    )
    wait_for(lambda: "started" in output(backend))
    backend.terminate(handle)
    state = wait_for(lambda: (st := backend.poll([handle])[handle]).kind != "running" and st)
    assert (state.kind, state.code) == ("exited", 3)
    assert "got TERM" in output(backend)


def test_kill_leaves_no_exit_status_and_no_process(backend: LocalBackend, root: Path) -> None:
    marker = "danlu-kill-marker-" + os.urandom(4).hex()
    handle = run(backend, spec(root, "sh", "-c", f"sleep 60 & exec sleep 61 # {marker}"))
    wait_for(lambda: any(marker in " ".join(p) for p in _cmdlines()))
    backend.kill(handle)
    assert wait_for(lambda: backend.poll([handle])[handle].kind == "lost")
    wait_for(lambda: not any(marker in " ".join(p) for p in _cmdlines()), timeout=10)


def test_a_run_never_started_by_a_dead_server_is_reported_never_started(tmp_path: Path, root: Path) -> None:
    require_sandbox()
    first, _ = make_local_backend(tmp_path / "data", network="none")
    handle = first.launch(spec(root, "sh", "-c", "echo must-not-run"))
    second, _ = make_local_backend(tmp_path / "data", network="none")  # the server restarted
    state = second.poll([handle])[handle]
    assert state.kind == "never_started" and "before the command started" in state.reason
    time.sleep(0.3)
    assert "must-not-run" not in output(second)


def test_a_recycled_pid_is_not_mistaken_for_the_run(backend: LocalBackend, root: Path) -> None:
    handle = run(backend, spec(root, "sleep", "60"))
    try:
        h = json.loads(handle)
        forged = json.dumps({**h, "ct": h["ct"] + 5})  # same pid, another process's start time
        assert backend.poll([forged])[forged].kind == "lost"
        backend.kill(forged)  # must not touch the real run
        assert backend.poll([handle])[handle].kind == "running"
    finally:
        backend.kill(handle)


def test_a_missing_command_fails_with_a_message(backend: LocalBackend, root: Path) -> None:
    handle = run(backend, spec(root, "definitely-not-a-command-xyz"))
    state = wait_for(lambda: (st := backend.poll([handle])[handle]).kind != "running" and st)
    assert state.kind == "exited" and state.code not in (0, None)
    assert "definitely-not-a-command-xyz" in output(backend)


def test_output_offsets_are_bounded(backend: LocalBackend) -> None:
    from danlu.core.errors import InvalidInput

    for bad in (-1, 2**63):
        with pytest.raises(InvalidInput) as err:
            backend.read_output("i-none", bad)
        assert err.value.code == "invalid_offset"


def _cmdlines() -> list[list[str]]:
    import psutil

    out = []
    for proc in psutil.process_iter(["cmdline"]):
        out.append(proc.info.get("cmdline") or [])
    return out


def test_a_poll_while_the_run_is_being_let_go_does_not_kill_it(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control loop may poll between the byte that lets the command go and the "started"
    marker: the run is still launching then, not a run a dead server never started."""
    require_sandbox()
    b, _ = make_local_backend(tmp_path / "data", network="none")
    handle = b.launch(spec(root, "sleep", "30"))
    verdicts = []
    real_write = os.write

    def write_then_poll(fd: int, data: bytes) -> int:
        n = real_write(fd, data)
        if data == b"go\n":
            verdicts.append(b.poll([handle])[handle].kind)
        return n

    monkeypatch.setattr("danlu.compute.backends.local.os.write", write_then_poll)
    b.start(handle)
    monkeypatch.undo()
    try:
        assert verdicts == ["running"] and b.poll([handle])[handle].kind == "running"
    finally:
        b.kill(handle)


def test_the_runs_pipes_may_have_any_fd_number(tmp_path: Path, root: Path) -> None:
    """The launch stashes stderr on a spare fd around keyctl; it must never be one of the fds bwrap
    is given (a fixed fd 9 once closed bwrap's info pipe — "Write to info_fd: Bad file descriptor" —
    or its block pipe, and the command ran before the platform had recorded it)."""
    require_sandbox()
    b, _ = make_local_backend(tmp_path / "data", network="none")
    free_low = [fd for fd in range(3, 16) if not _fd_open(fd)]
    for extra in range(len(free_low)):  # shift the pipes' numbers across the low range
        held = [os.open("/dev/null", os.O_RDONLY) for _ in range(extra)]
        try:
            run_id = f"i-fd{extra}"
            handle = b.launch(spec(root, "sh", "-c", "echo fine", run_id=run_id))
        finally:
            for fd in held:
                os.close(fd)
        time.sleep(0.2)
        assert output(b, run_id) == "", f"the command ran before start ({extra} fds held)"
        b.start(handle)
        wait_for(lambda rid=run_id: "fine" in output(b, rid), timeout=10)  # type: ignore[misc]
        b.kill(handle)


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_usage_counts_the_workspace_and_the_runs_own_network(backend: LocalBackend, root: Path) -> None:
    """A sandboxed run's usage has its workspace's size and its own network namespace's byte
    counters (0 here: network none, loopback not counted); an unsandboxed one shares the host's
    network and disk, and reports neither."""
    handle = run(backend, spec(root, "sh", "-c", "head -c 3145728 /dev/zero > blob; exec sleep 60"))
    wait_for(
        lambda: (root / "ws" / RUN_ID / "blob").exists() and (root / "ws" / RUN_ID / "blob").stat().st_size >= 3 << 20
    )
    backend.poll([handle])  # the disk watcher measures the runs the last poll saw running
    backend._disk.measure_now()
    used = wait_for(lambda: backend.usage([handle]).get(handle))
    assert isinstance(used, RunUsage)
    if backend.sandbox is not None:
        assert used.disk_bytes is not None and used.disk_bytes >= 3 << 20
        assert (used.net_rx_bytes, used.net_tx_bytes) == (0, 0)
    else:
        assert (used.disk_bytes, used.net_rx_bytes, used.net_tx_bytes) == (None, None, None)
    backend.kill(handle)


def test_net_dev_counts_every_interface_but_loopback() -> None:
    head = "Inter-|   Receive  |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes ...\n"
    rows = {"lo": (9000, 9000), "tap0": (1500, 700), "eth1": (500, 300)}
    text = head + "".join(f"{n:>6}: {rx} 3 0 0 0 0 0 0 {tx} 2 0 0 0 0 0 0\n" for n, (rx, tx) in rows.items())
    assert parse_net_dev(text) == (2000, 1000)


def test_a_log_offset_past_the_end_reads_nothing_at_any_size_the_api_allows(tmp_path: Path) -> None:
    """Offsets up to 2^62 are valid (the API says so), but seeking past the file system's largest file raised
    EINVAL: ``GET /instances/ID/logs?offset=1152921504606846976`` answered 500 (found by an attacker's pass)."""
    from danlu.backend import MAX_OFFSET, read_log

    (tmp_path / "runs" / "k").mkdir(parents=True)
    (tmp_path / "runs" / "k" / "output.log").write_bytes(b"hello")
    assert read_log(tmp_path, "k", 2, 1 << 20) == ("llo", 5)
    for offset in (5, 6, 1 << 60, MAX_OFFSET):
        assert read_log(tmp_path, "k", offset, 1 << 20) == ("", offset)
