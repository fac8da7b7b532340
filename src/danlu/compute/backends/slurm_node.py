"""The runner a Slurm batch job executes on its node: ``python -m danlu.compute.backends.slurm_node
SPEC.json``. It runs the spec in the local backend's sandbox on this node (supervisor, prlimit,
setpriv to the renter's uid, bubblewrap), passes SIGTERM (the preemption notice, ``scancel
--signal=TERM --batch``) into the sandbox, writes the run's CPU and memory beside its log every few
seconds for the server's telemetry, and exits with the command's exit code, which Slurm records.

The GPUs are the ones Slurm gave the job: with real GPUs the sandbox gets ``/dev/nvidiaN`` for each
index in ``SLURM_JOB_GPUS``; simulated ones keep their platform-made device files.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from danlu.compute.backends.base import Device, RunSpec, spec_from_json

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


def main(argv: list[str]) -> int:
    from danlu.compute.sandbox.probe import make_local_backend

    spec_path = Path(argv[1])
    node = json.loads(spec_path.read_text())
    spec = spec_from_json(json.dumps(node["spec"]))
    data_dir = Path(node["data_dir"])
    job_gpus = os.environ.get("SLURM_JOB_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES", "")
    spec = replace(spec, devices=slurm_devices(spec, job_gpus))
    backend, _ = make_local_backend(data_dir, no_sandbox=not node["sandboxed"])
    # this runner knows only its own run: sweeping the node's "unknown" empty cgroups removed the one a
    # concurrent runner had just created, before it attached (its rental exited with code 1 at once)
    backend.sweeps = False
    handle = backend.launch(spec)
    terminated = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal terminated
        terminated = True
        backend.terminate(handle)

    signal.signal(signal.SIGTERM, on_term)
    backend.start(handle)
    usage_path = spec_path.with_name(f"{spec.run_id}.usage")
    next_usage = 0.0
    while True:
        state = backend.poll([handle])[handle]
        if state.kind != "running":
            break
        if time.monotonic() >= next_usage:
            used = backend.usage([handle]).get(handle)
            if used is not None:
                tmp = usage_path.with_suffix(".usage.tmp")
                tmp.write_text(json.dumps(asdict(used)))
                tmp.replace(usage_path)
            next_usage = time.monotonic() + USAGE_EVERY_S
        time.sleep(0.2)
    backend.release(handle)
    if state.kind == "exited" and state.code is not None:
        return state.code
    return 143 if terminated else 137


if __name__ == "__main__":
    sys.exit(main(sys.argv))
