"""The operator's inventory: every GPU of every host, real or simulated, and who holds it."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from danlu.context import Platform
from danlu.db.models import AllocationRow, Gpu, HostRow


@dataclass(frozen=True)
class GpuInfo:
    host: str
    index: int
    uuid: str
    model: str
    nvml_name: str
    vram_mb: int
    simulated: bool
    present: bool
    instance_id: str | None
    hold_id: str | None = None  # the package or reservation keeping it for one account


def list_gpus(p: Platform) -> list[GpuInfo]:
    with p.db.read() as s:
        rows = s.execute(
            select(Gpu, HostRow.name, AllocationRow.instance_id)
            .join(HostRow, HostRow.id == Gpu.host_id)
            .outerjoin(AllocationRow, AllocationRow.id == Gpu.allocation_id)
            .order_by(Gpu.host_id, Gpu.idx)
        ).all()
        return [
            GpuInfo(host, g.idx, g.uuid, g.model, g.nvml_name, g.vram_mb, g.simulated, g.present, inst, g.hold_id)
            for g, host, inst in rows
        ]
