"""Hosts as the operator configures them: what a rental may use per GPU (vCPU, RAM, disk,
processes) and the sandbox network policy; shown in offers and ``danlu admin hosts``."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.backend import Limits
from danlu.compute.sandbox.network import POLICIES
from danlu.context import Platform
from danlu.core.errors import InvalidInput, NotFound
from danlu.db.models import Gpu, HostRow

MIB = 1 << 20


@dataclass
class HostView:
    name: str
    gpus: int
    cpus_per_gpu: str  # e.g. "2" or "1.5"
    mem_per_gpu_mb: int
    disk_per_gpu_mb: int
    pids_per_gpu: int
    network_policy: str
    sandbox: str
    limits_enforced_by: str
    identity: str
    detail: str


def cpus_text(milli: int) -> str:
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli / 1000:g}"


def machine_defaults(n_gpus: int) -> dict[str, int]:
    """Per-GPU shares of this machine: its cores and 90% of its memory split evenly over its GPUs."""
    n = max(1, n_gpus)
    cores = os.cpu_count() or 1
    return {
        "cpus_per_gpu_milli": max(100, cores * 1000 // n),
        "mem_per_gpu_mb": max(256, psutil.virtual_memory().total * 9 // 10 // n // MIB),
        "disk_per_gpu_mb": 50 * 1024,
        "pids_per_gpu": 1024,
    }


def limits_for(host: HostRow, gpus: int) -> Limits:
    return Limits(
        cpus_milli=host.cpus_per_gpu_milli * gpus,
        memory_bytes=host.mem_per_gpu_mb * MIB * gpus,
        pids=host.pids_per_gpu * gpus,
        disk_bytes=host.disk_per_gpu_mb * MIB * gpus,
    )


def configure(
    p: Platform,
    s: Session,
    host: HostRow,
    *,
    cpus_per_gpu_milli: int | None = None,
    mem_per_gpu_mb: int | None = None,
    disk_per_gpu_mb: int | None = None,
    pids_per_gpu: int | None = None,
    network_policy: str | None = None,
) -> None:
    """Change a host's per-GPU limits or network policy; applies to runs started from now on."""
    bounds = {
        "cpus_per_gpu_milli": (cpus_per_gpu_milli, 100, 1_000_000, "vCPUs per GPU is between 0.1 and 1000"),
        "mem_per_gpu_mb": (mem_per_gpu_mb, 64, 1 << 30, "memory per GPU is between 64 MiB and 1 PiB"),
        "disk_per_gpu_mb": (disk_per_gpu_mb, 16, 1 << 40, "disk per GPU is between 16 MiB and 1 EiB"),
        "pids_per_gpu": (pids_per_gpu, 16, 1 << 22, "processes per GPU is between 16 and 4194304"),
    }
    for column, (value, low, high, message) in bounds.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput("invalid_host_limit", message)
        setattr(host, column, value)
    if network_policy is not None:
        if network_policy not in POLICIES:
            raise InvalidInput("invalid_network_policy", f"the network policy is one of {', '.join(POLICIES)}")
        if network_policy == "outbound" and not p.sandbox.outbound_ok:
            raise InvalidInput(
                "network_policy_unavailable",
                "outbound needs a root server with slirp4netns, nftables and /dev/net/tun; choose none or host",
            )
        host.network_policy = network_policy
    s.flush()


def get_host(s: Session, name: str) -> HostRow:
    host = s.scalars(select(HostRow).where(HostRow.name == name)).first() if len(name) <= 128 else None
    if host is None:
        raise NotFound("host_not_found", f"no host named {name!r}; list them with `danlu admin hosts`")
    return host


def list_hosts(p: Platform) -> list[HostView]:
    with p.db.read() as s:
        counts = dict(
            s.execute(select(Gpu.host_id, func.count()).where(Gpu.present.is_(True)).group_by(Gpu.host_id)).all()
        )
        hosts = list(s.scalars(select(HostRow).order_by(HostRow.id)))
    sb = p.sandbox
    return [
        HostView(
            name=h.name,
            gpus=int(counts.get(h.id, 0)),
            cpus_per_gpu=cpus_text(h.cpus_per_gpu_milli),
            mem_per_gpu_mb=h.mem_per_gpu_mb,
            disk_per_gpu_mb=h.disk_per_gpu_mb,
            pids_per_gpu=h.pids_per_gpu,
            network_policy=h.network_policy,
            sandbox=sb.mode,
            limits_enforced_by=sb.limits if sb.sandboxed else "none",
            identity=sb.identity,
            detail=sb.detail,
        )
        for h in hosts
    ]


def configure_host(
    p: Platform,
    name: str,
    *,
    cpus_per_gpu: float | None = None,
    mem_per_gpu_mb: int | None = None,
    disk_per_gpu_mb: int | None = None,
    pids_per_gpu: int | None = None,
    network_policy: str | None = None,
) -> HostView:
    """The operator's host settings, in one transaction; returns the host as listed."""
    milli = None
    if cpus_per_gpu is not None:
        if not 0 < cpus_per_gpu < 1e6:
            raise InvalidInput("invalid_host_limit", "vCPUs per GPU is between 0.1 and 1000")
        milli = round(cpus_per_gpu * 1000)
    with p.db.write() as s:
        configure(
            p,
            s,
            get_host(s, name),
            cpus_per_gpu_milli=milli,
            mem_per_gpu_mb=mem_per_gpu_mb,
            disk_per_gpu_mb=disk_per_gpu_mb,
            pids_per_gpu=pids_per_gpu,
            network_policy=network_policy,
        )
    return next(v for v in list_hosts(p) if v.name == name)
