"""The runner a Slurm batch job executes on its node: ``python -m danlu.compute.backends.slurm_node
SPEC.json``. It runs the spec in the local backend's sandbox on this node (supervisor, prlimit,
setpriv to the renter's uid, bubblewrap), passes SIGTERM (the preemption notice, ``scancel
--signal=TERM --batch``; on each node of a gang, the notice file ``RUN.notice`` appearing) into the
sandbox, writes the run's CPU and memory beside its log every few seconds for the server's telemetry,
and exits with the command's exit code, which Slurm records.

The GPUs are the ones Slurm gave the job: with real GPUs the sandbox gets ``/dev/nvidiaN`` for each
index in ``SLURM_JOB_GPUS``; simulated ones keep their platform-made device files.

The runner keeps its local handle beside the spec (``RUN.local``, 0600) while the run lives, so a
session reaches the run from the server with ``srun --overlap --jobid=JOB`` running this module again
on the node (danlu.compute.backends.slurm says how):

- ``enter SPEC``: the request (``DANLU_ENTER``, JSON, from srun's environment: never a command line)
  started in the run's sandbox exactly as on a local host; with a terminal, a pty of its own for the
  command, relayed to the one srun --pty gave this process, window size included.
- ``connect SPEC PORT``: one TCP connection to the run's own PORT inside its network namespace,
  relayed to stdin/stdout after one status line (``+`` reached, ``-CODE MESSAGE`` not).
- ``listening SPEC``: the listening ports, as JSON.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from danlu.backend import Device, EnterError, EnterRequest, RunSpec, enter_with_terminal, spec_from_json
from danlu.compute.backends.local import volume_folders
from danlu.compute.backends.slurm_parse import rank_run_id
from danlu.compute.sandbox import volume

USAGE_EVERY_S = 5.0
NVIDIA_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


def slurm_devices(spec: RunSpec, job_gpus: str) -> tuple[Device, ...]:
    """The sandbox's device nodes for the GPUs Slurm chose (pure): ``SLURM_JOB_GPUS=0,2`` →
    /dev/nvidia0 and /dev/nvidia2 (and the control nodes), seen inside under the same names."""
    if not spec.devices or all(d.simulated for d in spec.devices):
        return spec.devices
    indices = [int(i) for i in job_gpus.split(",") if i.strip().isdigit()]
    out = [Device(Path(f"/dev/nvidia{i}"), f"/dev/nvidia{i}", False) for i in indices]
    out += [Device(Path("/dev") / n, f"/dev/{n}", False) for n in NVIDIA_CONTROL_NODES if (Path("/dev") / n).exists()]
    return tuple(out)


MASTER_PORT_BASE = 20000  # a gang's rendezvous port: this + the Slurm job id modulo 10,000


def gang_env(spec: RunSpec, rank: int, part: int, job_id: str, master_addr: str) -> dict[str, str]:
    """What a distributed training launcher reads on the gang's node of rank ``rank`` (Slurm's node order: rank
    0 runs the batch script, at ``master_addr``), which holds the platform's part ``part`` (pure): that part's
    GPUs' variables, torch.distributed's env:// (MASTER_ADDR, MASTER_PORT, WORLD_SIZE as one process per GPU),
    the node's rank and count, and torchrun's own options as its ``PET_`` variables (``torchrun train.py``
    needs no flags)."""
    per_node = spec.gpu_count // len(spec.nodes)
    port = str(MASTER_PORT_BASE + int(job_id) % 10000 if job_id.isdigit() else MASTER_PORT_BASE)
    return {
        **(spec.node_env[part] if part < len(spec.node_env) else {}),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(spec.gpu_count),
        "NODE_RANK": str(rank),
        "NNODES": str(len(spec.nodes)),
        "LOCAL_WORLD_SIZE": str(per_node),
        "DANLU_NODES": ",".join(spec.nodes),
        "PET_NNODES": str(len(spec.nodes)),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": str(per_node),
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": port,
    }


def gang_place(spec: RunSpec, environ: dict[str, str]) -> tuple[int, int]:
    """(rank, part) of this runner: its rank is Slurm's node index (``SLURM_NODEID``: node 0 runs the batch
    script, so it is the rendezvous master and keeps the files sessions find); its part of the platform's
    placement is the one named by its node (``SLURMD_NODENAME``), whose GPUs it was given — Slurm orders
    the nodes its own way, not necessarily as the platform listed them."""
    rank = int(environ.get("SLURM_NODEID", "0"))
    name = environ.get("SLURMD_NODENAME", "")
    return rank, spec.nodes.index(name) if name in spec.nodes else rank


def node_spec(spec: RunSpec, rank: int, part: int, job_id: str, master_addr: str) -> RunSpec:
    """The gang's node of rank ``rank`` holding part ``part`` (:func:`gang_place`) as a run of its own (pure):
    that part's GPUs' devices and variables, a run id of its own (its cgroup, exit and heartbeat files: a node
    may share its machine with another of the gang), one node."""
    if not spec.nodes:
        return spec
    per_node = len(spec.devices) // len(spec.nodes)
    return replace(
        spec,
        run_id=rank_run_id(spec.run_id, rank),
        env={**spec.env, **gang_env(spec, rank, part, job_id, master_addr)},
        devices=spec.devices[part * per_node : (part + 1) * per_node],
        host=spec.nodes[part],
        gpu_count=spec.gpu_count // len(spec.nodes),
        nodes=(),
        node_env=(),
    )


def main(argv: list[str]) -> int:
    from danlu.compute.sandbox.probe import make_local_backend

    spec_path = Path(argv[1])
    node = json.loads(spec_path.read_text())
    spec = spec_from_json(json.dumps(node["spec"]))
    data_dir = Path(node["data_dir"])
    gang = bool(spec.nodes)
    notice_path = spec_path.with_name(f"{spec.run_id}.notice")  # a gang's notice (SlurmBackend.terminate)
    rank, part = gang_place(spec, dict(os.environ)) if gang else (0, 0)
    # srun's tasks: the address of the node that launched them, the batch script's (rank 0's)
    master = os.environ.get("SLURM_LAUNCH_NODE_IPADDR") or socket.gethostname()
    gang_spec, job = spec, os.environ.get("SLURM_JOB_ID", "")
    spec = node_spec(spec, rank, part, job, master)
    job_gpus = os.environ.get("SLURM_JOB_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES", "")
    spec = replace(spec, devices=slurm_devices(spec, job_gpus))
    backend, _ = make_local_backend(data_dir, no_sandbox=not node["sandboxed"])
    # this runner knows only its own run: sweeping the node's "unknown" empty cgroups removed the one a
    # concurrent runner had just created, before it attached (its rental exited with code 1 at once)
    backend.sweeps = False
    if gang and backend.sandbox is not None and backend.sandbox.disk == "image":
        # every node works in the one shared workspace folder: a file system image can be mounted by one
        # kernel only, so a gang's disk limit is the watcher's (each node measures the folder)
        if any(volume.image_of(folder).exists() for folder in volume_folders(spec)):
            raise SystemExit(
                "danlu: this job's workspace is a disk image from a run on one host; a gang over several "
                "nodes cannot share it (run the job on one host, or as a new job)"
            )
        backend.sandbox = replace(backend.sandbox, disk="watch")
    handle = backend.launch(spec)
    local = spec_path.with_name(f"{spec.run_id}.local")
    tmp = local.with_suffix(".local.tmp")
    tmp.write_text(handle)
    os.chmod(tmp, 0o600)
    tmp.replace(local)
    if gang and rank == 0:  # where sessions go: the node of the runner that keeps RUN.local, with its variables
        _replace(spec_path.with_name(f"{spec.run_id}.node"), spec.host)
        _replace(
            spec_path.with_name(f"{spec.run_id}.gangenv"), json.dumps(gang_env(gang_spec, rank, part, job, master))
        )
    terminated = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal terminated
        terminated = True
        backend.terminate(handle)

    signal.signal(signal.SIGTERM, on_term)
    backend.start(handle)
    usage_path = spec_path.with_name(f"{spec.run_id}.usage")
    alive_path = spec_path.with_name(f"{spec.run_id}.alive")
    next_usage = 0.0
    while True:
        state = backend.poll([handle])[handle]
        if state.kind != "running":
            break
        if gang and not terminated and notice_path.exists():
            on_term(signal.SIGTERM, None)
        if time.monotonic() >= next_usage:
            # The heartbeat: the run was alive at this moment (the server bills no further than the last one,
            # so a dead node is not billed until Slurm notices; SlurmBackend.alive_until).
            _replace(alive_path, str(int(time.time() * 1000)))
            used = backend.usage([handle]).get(handle)
            if used is not None:
                _replace(usage_path, json.dumps(asdict(used)))
            next_usage = time.monotonic() + USAGE_EVERY_S
        time.sleep(0.2)
    local.unlink(missing_ok=True)
    backend.release(handle)
    if state.kind == "exited" and state.code is not None:
        return state.code
    return 143 if terminated else 137


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (a reader on the server never sees half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _local(spec_path: Path) -> tuple[dict[str, Any], str]:
    """The spec the runner was given and its local handle (the run must still be running)."""
    node = json.loads(spec_path.read_text())
    try:
        return node, spec_path.with_name(f"{node['spec']['run_id']}.local").read_text()
    except FileNotFoundError:
        raise EnterError("the run has ended") from None


def enter_main(spec_path: Path) -> int:
    from danlu.compute.sandbox.probe import make_local_backend

    ask = json.loads(os.environ.pop("DANLU_ENTER"))
    try:
        node, handle = _local(spec_path)
        try:  # a gang's rank 0: its own GPUs' and the rendezvous variables, as its command has them
            ask["env"] = {
                **ask["env"],
                **json.loads(spec_path.with_name(f"{node['spec']['run_id']}.gangenv").read_text()),
            }
        except FileNotFoundError:
            pass
        backend, _ = make_local_backend(Path(node["data_dir"]), no_sandbox=not node["sandboxed"])
        backend.sweeps = False
        if not ask["tty"]:
            proc = backend.enter(handle, EnterRequest(ask["argv"], ask["env"], (0, 1, 2), die_with_parent=True))
            for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda s, _f: proc.send_signal(s))
            return proc.wait()
        master, slave = pty.openpty()  # the helper's own stdio; the command's terminal comes back
        _copy_size(slave)
        proc, master = enter_with_terminal(backend, handle, ask["argv"], ask["env"], master, slave, die=True)
    except EnterError as exc:
        os.write(2, f"danlu: cannot enter the run: {exc}\r\n".encode())
        return 125
    return _relay_terminal(proc, master)


def _copy_size(to: int) -> None:
    """srun's terminal's window size (fd 0) onto ``to``'s."""
    try:
        fcntl.ioctl(to, termios.TIOCSWINSZ, fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        pass


def _relay_terminal(proc: subprocess.Popen[bytes], master: int) -> int:
    """srun's terminal (fd 0/1, raw: every key goes through as a byte) <-> the command's pty (the
    sandbox's own, handed back by the helper), resizes passed on."""
    import tty

    signal.signal(signal.SIGWINCH, lambda _s, _f: _copy_size(master))
    signal.signal(signal.SIGHUP, lambda _s, _f: proc.send_signal(signal.SIGHUP))
    try:
        tty.setraw(0, termios.TCSANOW)  # not the default TCSAFLUSH: keys typed already must stay
    except termios.error:
        pass
    fds = [0, master]
    while True:
        try:
            ready, _, _ = select.select(fds, [], [])
        except InterruptedError:
            continue
        if master in ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command and everything it started closed the terminal
                break
            if not data:
                break
            os.write(1, data)
        if 0 in ready:
            data = os.read(0, 65536)
            if not data:  # the client is gone: hang up, as a terminal does
                fds.remove(0)
                proc.send_signal(signal.SIGHUP)
                continue
            os.write(master, data)
    return proc.wait()


def connect_main(spec_path: Path, port: int) -> int:
    from danlu.compute.backends import netns

    try:
        _, handle = _local(spec_path)
        sock = netns.connect(json.loads(handle), port)
    except EnterError as exc:
        code = "port_closed" if isinstance(exc, netns.PortClosed) else "enter"
        os.write(1, f"-{code} {exc}\n".encode())
        return 0
    os.write(1, b"+")

    def inward() -> None:
        while data := os.read(0, 65536):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=inward, daemon=True).start()
    while data := sock.recv(65536):
        os.write(1, data)
    return 0


def listening_main(spec_path: Path) -> int:
    from danlu.compute.backends import netns

    try:
        _, handle = _local(spec_path)
        ports = netns.listening(json.loads(handle))
    except EnterError:
        ports = []
    print(json.dumps(ports))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "enter":
        sys.exit(enter_main(Path(sys.argv[2])))
    if sys.argv[1] == "connect":
        sys.exit(connect_main(Path(sys.argv[2]), int(sys.argv[3])))
    if sys.argv[1] == "listening":
        sys.exit(listening_main(Path(sys.argv[2])))
    sys.exit(main(sys.argv))
