"""GPU device nodes a run is given: exactly its allocated GPUs' nodes, nothing else.

Real GPUs are ``/dev/nvidiaN`` (N = the device's minor number, which NVML reports and which need
not equal its index), plus the driver's control nodes. A simulated GPU is a plain file the platform
makes under ``DATA/devices`` (one per simulated GPU), bound into the sandbox as ``/dev/nvidiaN`` the
same way, so the binding is exercised and tested on machines without GPUs. They live in the
sandbox folder, world-readable and read-only: only the bound ones are reachable from a sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from danlu.backend import Device
from danlu.db.models import Gpu

NVIDIA_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


def simulated_device_file(sandbox_root: Path, uuid: str) -> Path:
    return sandbox_root / "devices" / uuid


def make_simulated_device_files(sandbox_root: Path, uuids: Iterable[str]) -> None:
    """One world-readable, read-only file per simulated GPU (renters open only the bound ones)."""
    folder = sandbox_root / "devices"
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o711)
    for uuid in uuids:
        path = simulated_device_file(sandbox_root, uuid)
        if not path.exists():
            path.write_text(f"simulated GPU {uuid}\n")
        os.chmod(path, 0o444)


def devices_for(gpus: Iterable[Gpu], sandbox_root: Path, dev: Path = Path("/dev")) -> tuple[Device, ...]:
    out: list[Device] = []
    real = False
    for g in sorted(gpus, key=lambda g: g.idx):
        minor = g.device_minor if g.device_minor is not None else g.idx
        if g.simulated:
            out.append(Device(simulated_device_file(sandbox_root, g.uuid), f"/dev/nvidia{minor}", True))
        else:
            real = True
            out.append(Device(dev / f"nvidia{minor}", f"/dev/nvidia{minor}", False))
    if real:
        out += [Device(dev / n, f"/dev/{n}", False) for n in NVIDIA_CONTROL_NODES if (dev / n).exists()]
    return tuple(out)
