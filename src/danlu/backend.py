"""The compute backend protocol: the one seam between the platform and whatever runs workloads.

Above this line nothing knows what a pid, a cgroup or a Slurm job id is. The platform hands a
backend a :class:`RunSpec` and gets back an opaque **run handle** (a string it stores and hands
back verbatim); it then asks the backend, every tick, how each handle's run stands
(:meth:`Backend.poll`: running, exited with code and time, or lost) and tells it to terminate
(graceful) or kill (hard) a run. The local sandbox is the first backend; Slurm and Kubernetes
follow on the same protocol.

Launch is two-phase so no command ever runs untracked: :meth:`Backend.launch` prepares the run and
returns its handle with the command **not yet started**; the platform records the handle, then
calls :meth:`Backend.start`. If the server dies in between, the run never starts, and a restarted
server finds it through its handle (or, with no handle, through :meth:`Backend.discard`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

# The file (in the run's read-only control folder, ``$DANLU_PREEMPT_FILE``) a preemption notice writes.
PREEMPT_FILE = "DANLU_PREEMPT_DEADLINE"


class LaunchError(Exception):
    """The run could not be prepared (sandbox set-up failed, no such image …); nothing runs."""


@dataclass(frozen=True)
class Limits:
    """What one run may use; enforced by the backend (cgroups, else rlimits and checks)."""

    cpus_milli: int  # 1000 = one core
    memory_bytes: int
    pids: int
    disk_bytes: int  # the workspace

    def describe(self) -> dict[str, int]:
        return {
            "cpus_milli": self.cpus_milli,
            "memory_mb": self.memory_bytes >> 20,
            "pids": self.pids,
            "disk_mb": self.disk_bytes >> 20,
        }


@dataclass(frozen=True)
class Device:
    """One GPU device node: where it is on the host, and where the run sees it."""

    host_path: Path
    sandbox_path: str
    simulated: bool


@dataclass(frozen=True)
class ImageRoot:
    """The root filesystem a run sees, read-only. ``host``: this host's /usr, /etc …;
    ``rootfs``: a registered tree at ``path``."""

    name: str
    kind: Literal["host", "rootfs"]
    path: Path = Path("/")


@dataclass(frozen=True)
class RunSpec:
    run_id: str  # unique per run (the instance id)
    log_key: str  # runs sharing a key append to one output log (a job's runs)
    command: list[str]
    env: dict[str, str]  # platform variables + the renter's own; the backend adds PATH, HOME …
    workspace: Path  # persistent; the run's /workspace and HOME
    control_dir: Path  # platform-written, read-only to the run (the preemption deadline file)
    checkpoints: Path | None = None  # a job's checkpoint directory, persisting across its runs
    devices: tuple[Device, ...] = ()
    limits: Limits | None = None
    image: ImageRoot = ImageRoot("host", "host")
    network: str = "none"  # none | outbound | host
    uid: int | None = None  # the renter's own unprivileged uid (= gid)
    extra: dict[str, str] = field(default_factory=dict)
    host: str = ""  # the host the platform placed the run on (a Slurm node name, for that backend)
    gpu_model: str = ""  # the catalog model of its GPUs ("" when it has none)
    gpu_count: int = 0
    interruptible: bool = False  # may be preempted (Slurm: its spot partition)
    # A gang over several hosts (``spans_hosts`` backends): their names, the first where ``host`` is, and each
    # one's own variables (its GPUs' CUDA_VISIBLE_DEVICES …); ``devices`` in the same order, the same count
    # on each; ``limits`` are one node's. Empty: the run is on ``host`` alone.
    nodes: tuple[str, ...] = ()
    node_env: tuple[dict[str, str], ...] = ()


def spec_to_json(spec: RunSpec) -> str:
    """The spec as JSON (what the Slurm backend hands its runner on the node)."""
    data = asdict(spec)
    for key in ("workspace", "control_dir", "checkpoints"):
        data[key] = str(data[key]) if data[key] is not None else None
    data["devices"] = [{**d, "host_path": str(d["host_path"])} for d in data["devices"]]
    data["image"] = {**data["image"], "path": str(data["image"]["path"])}
    return json.dumps(data, sort_keys=True)


def spec_from_json(text: str) -> RunSpec:
    data = json.loads(text)
    for key in ("workspace", "control_dir", "checkpoints"):
        data[key] = Path(data[key]) if data[key] is not None else None
    data["devices"] = tuple(Device(**{**d, "host_path": Path(d["host_path"])}) for d in data["devices"])
    data["limits"] = Limits(**data["limits"]) if data["limits"] is not None else None
    data["image"] = ImageRoot(**{**data["image"], "path": Path(data["image"]["path"])})
    data["nodes"] = tuple(data.get("nodes", ()))
    data["node_env"] = tuple(data.get("node_env", ()))
    return RunSpec(**data)


@dataclass(frozen=True)
class RunState:
    """How a run stands. ``exited``: ended by itself (or by a limit), with its code and the
    moment it ended; ``lost``: gone without an exit status (killed, or its host vanished), with the
    moment the backend's own records say it ended where it has one (billing never goes past it);
    ``never_started``: prepared but its command never ran (the server died before letting it go);
    ``unknown``: the backend cannot tell now (a cluster controller that does not answer): nothing is
    decided about the run, and it is not counted as seen alive either."""

    kind: Literal["running", "exited", "lost", "never_started", "unknown"]
    code: int | None = None
    ended_ms: int | None = None
    reason: str = ""


RUNNING = RunState("running")


@dataclass(frozen=True)
class RunUsage:
    """What a running run's processes have used: CPU seconds since it started (cumulative, so a
    rate is the difference of two readings) and resident memory now."""

    cpu_s: float
    rss_bytes: int
    disk_bytes: int | None = None  # the workspace, as the disk-limit watcher last measured it
    net_rx_bytes: int | None = None  # its own network namespace's traffic so far (None: host network)
    net_tx_bytes: int | None = None


MAX_OFFSET = 1 << 62


def run_dir(data_dir: Path, log_key: str) -> Path:
    """``DATA/runs/KEY``: a run's (or a job's runs') platform-private folder: log, exit file, spec."""
    path = data_dir / "runs" / log_key
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def run_file(data_dir: Path, h: Mapping[str, Any], suffix: str) -> Path:
    """``DATA/runs/KEY/RUN.SUFFIX`` of a handle's run (``h``: its ``log`` key and ``run`` id)."""
    return data_dir / "runs" / str(h["log"]) / f"{h['run']}.{suffix}"


def read_log(data_dir: Path, log_key: str, offset: int, limit: int) -> tuple[str, int]:
    """A chunk of a run's captured stdout/stderr (``DATA/runs/KEY/output.log``) from byte ``offset``;
    returns (text, next offset). Invalid UTF-8 is replaced, never an error."""
    from danlu.core.errors import InvalidInput

    if not 0 <= offset <= MAX_OFFSET:
        raise InvalidInput("invalid_offset", "offset must be a byte offset between 0 and 2^62")
    try:
        with open(data_dir / "runs" / log_key / "output.log", "rb") as f:
            if offset >= os.fstat(f.fileno()).st_size:  # past the end: seeking past the largest file size
                return "", offset  # a file system allows raises EINVAL
            f.seek(offset)
            data = f.read(limit)
    except FileNotFoundError:
        return "", offset
    return data.decode("utf-8", errors="replace"), offset + len(data)


class EnterError(Exception):
    """A session cannot join this run (not running here, or this backend cannot enter runs)."""


@dataclass(frozen=True)
class EnterRequest:
    """A process to start inside a running run's sandbox (an exec, a shell): its command, its
    environment (the whole of it, as the platform built it) and the descriptors it gets as stdin,
    stdout and stderr (a terminal's for a shell: ``tty``)."""

    command: list[str]
    env: dict[str, str]
    stdio: tuple[int, int, int]
    tty: bool = False
    # Ends (SIGKILL) when the process that asked ends: a Slurm node's session, whose asker is the
    # step Slurm kills when the server's srun goes (not the server's, whose threads come and go).
    die_with_parent: bool = False
    # A Unix socket (fd) over which a sandboxed session with a terminal hands back the master of the
    # pty it made in the sandbox's own devpts: the caller then reads and writes the command's
    # terminal directly (stdio stays the helper's own, for its errors). None, or a backend that makes
    # no such pty (no sandbox, Slurm from the server): nothing comes back (EOF) and stdio is the terminal.
    terminal_back: int | None = None


class Backend(Protocol):
    name: str
    # False (local): launch → record the handle → start. True (Slurm): launch → start, which returns
    # the start time the backend recorded → record the handle with billing from exactly then (a server
    # that dies in between leaves a pending row with no handle: the run is found by its id and
    # discarded, never billed).
    starts_before_record: bool
    # True (Slurm): one run may be a gang over several hosts (``RunSpec.nodes``), all started and ended as
    # one; False (local): a run is on one host, and a job needing more GPUs than a host has is refused.
    spans_hosts: bool

    def launch(self, spec: RunSpec) -> str:
        """Prepare the run; returns its handle. The command does not start until :meth:`start`."""
        ...

    def start(self, handle: str) -> int | None:
        """Let a launched run's command begin. Returns when the run started by the backend's own
        records (epoch ms; billing starts then), or None when the platform's clock is the record."""
        ...

    def cancel(self, handle: str) -> int | None:
        """End the run now the backend's own way (Slurm: ``scancel``, its own grace then SIGKILL) and
        return the end it recorded (billing ends exactly then); None: not supported, the platform
        sends :meth:`terminate` and, after its grace period, :meth:`kill`."""
        ...

    def unavailable(self) -> str | None:
        """Why new runs cannot be launched now (a cluster controller that does not answer), else None."""
        ...

    def poll(self, handles: Sequence[str]) -> dict[str, RunState]:
        """How each run stands now. Cheap enough to call every tick for every run."""
        ...

    def alive_until(self, handles: Sequence[str]) -> dict[str, int]:
        """For runs whose records can lag their death, the last moment (epoch ms) each was known alive by
        the run's own heartbeat (Slurm keeps a dead node's jobs RUNNING until its SlurmdTimeout, 300 s in
        production; the node runner writes a heartbeat every few seconds). A running run is billed no
        further than this, and a lost one ends there. Runs left out (every run, locally: the platform
        watches the process itself) are known alive now."""
        ...

    def terminate(self, handle: str) -> None:
        """Ask the run's processes to end (SIGTERM); the run may checkpoint and exit."""
        ...

    def kill(self, handle: str) -> None:
        """End the run at once, every process of it; it leaves no exit status (→ lost/stopped)."""
        ...

    def release(self, handle: str) -> None:
        """The platform is done with a finished run: free what the backend holds for it."""
        ...

    def discard(self, run_id: str) -> None:
        """Kill whatever a launch of ``run_id`` left behind when its handle was never recorded."""
        ...

    def launching(self, run_id: str) -> bool:
        """Whether this process is launching ``run_id`` right now (so a missing handle is not lost)."""
        ...

    def held_elsewhere(self) -> dict[tuple[str, str], int] | None:
        """GPUs that jobs the platform did not start hold now, as (host, catalog model) -> count, from
        the last :meth:`poll` (a Slurm cluster's other users); None: not known (this machine's own)."""
        ...

    def ref(self, handle: str) -> str:
        """Where the run is, for people: ``slurm:JOBID``, ``local:PID``."""
        ...

    def read_output(self, log_key: str, offset: int, limit: int = 1 << 20) -> tuple[str, int]:
        """A chunk of the captured stdout/stderr from byte ``offset``; returns (text, next offset)."""
        ...

    def enter(self, handle: str, request: EnterRequest) -> subprocess.Popen[bytes]:
        """Start ``request`` inside the run's sandbox: the renter's uid, the run's namespaces,
        cgroup and limits; gone when the run ends. Returns the process (its exit status is the
        command's). Raises :class:`EnterError` when the run cannot be entered."""
        ...

    def connect(self, handle: str, port: int) -> socket.socket:
        """A TCP connection to ``port`` on the run's own loopback, made inside its network namespace
        (no host port is opened). Raises :class:`EnterError` when the run cannot be reached."""
        ...

    async def dial(self, handle: str, port: int) -> socket.socket:
        """:meth:`connect` for the event loop (the port proxy's every request): no pool thread."""
        ...

    def listening(self, handle: str) -> list[int]:
        """The TCP ports something listens on inside the run ([] where it cannot tell)."""
        ...

    def usage(self, handles: Sequence[str]) -> dict[str, RunUsage]:
        """CPU and memory of each run still running (the ones it cannot read are left out). Cheap
        enough for every run every sample period (danlu.telemetry.sampler)."""
        ...


def receive_terminal(sock: socket.socket, timeout_s: float = 30.0) -> int | None:
    """The pty master a session's helper handed back over ``sock`` (EnterRequest.terminal_back), or
    None when none comes (EOF: the backend makes none, or the helper failed and said why on stdio)."""
    sock.settimeout(timeout_s)
    try:
        _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    except OSError:
        return None
    return fds[0] if fds else None


def enter_with_terminal(
    backend: Backend, handle: str, argv: list[str], env: dict[str, str], master: int, slave: int, *, die: bool = False
) -> tuple[subprocess.Popen[bytes], int]:
    """``argv`` inside the run with a terminal: the pty ``master``/``slave`` made by the caller is the
    helper's own stdio (its errors reach the terminal). Returns the process and the master to use: the
    sandbox's own pty when the helper handed it back (``master`` is then closed), else ``master``.
    ``slave`` is closed either way; ``master`` is closed too if the process could not be started."""
    ours, theirs = socket.socketpair()
    try:
        proc = backend.enter(handle, EnterRequest(argv, env, (slave,) * 3, True, die, theirs.fileno()))
    except BaseException:
        os.close(master)
        ours.close()
        raise
    finally:
        os.close(slave)
        theirs.close()
    with ours:
        inner = receive_terminal(ours)
    if inner is None:
        return proc, master
    os.close(master)
    return proc, inner


@dataclass(frozen=True)
class SandboxStatus:
    """What sandboxing this host gives (found by danlu.compute.sandbox.probe at start-up)."""

    mode: str  # bubblewrap | off | unavailable
    detail: str  # one line a person reads
    limits: str = "none"  # cgroup-v2 | cgroup-v1 | rlimits | none
    network: str = "host"  # the effective default network policy of this host
    identity: str = "platform user"  # per-renter uid | platform user
    outbound_ok: bool = False  # whether the ``outbound`` policy can be chosen for this host
    disk: str = "none"  # how the workspace disk limit holds: kernel | watched | none
    keys: Path | None = None  # where workspaces' keys are kept (danlu.compute.sandbox.crypt)
    encrypt: bool = False  # new workspaces are encrypted at rest (--encrypt-workspaces)

    @property
    def disk_enforced_by(self) -> str:
        if self.disk == "kernel":
            return "kernel (an ext4 file system of the limit's size)"
        return "a check every 15 s (no kernel limit on this host)" if self.disk == "watched" else "none"

    @property
    def sandboxed(self) -> bool:
        return self.mode == "bubblewrap"

    def banner(self) -> str:
        if self.mode == "bubblewrap":
            what = f"{self.identity}; limits by {self.limits}; disk limit by {self.disk_enforced_by}"
            what += f"; network {self.network}"
            what += "; workspaces encrypted at rest (gocryptfs)" if self.encrypt else ""
            return f"sandbox: bubblewrap ({what}) — {self.detail}"
        if self.mode == "off":
            return f"sandbox: OFF (--no-sandbox) — {self.detail}"
        return f"sandbox: UNAVAILABLE — {self.detail}"
