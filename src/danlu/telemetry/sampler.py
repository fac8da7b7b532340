"""One sample of every running instance (docs/telemetry.md "Sampling"): the backend's CPU and memory
of the run, NVML for real GPUs, and for simulated GPUs a utilisation derived from the run's CPU:
the share of its allotted cores it used since the last sample (a busy loop 100 %, a ``sleep`` 0 %).

The sampler keeps each run's last CPU reading in memory; the first sample of a run (or after a
server restart) only primes it. Timestamps and rates use the platform's clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import insert, select

from danlu.compute.lifecycle import Status
from danlu.context import Platform
from danlu.db.models import AllocationRow, Gpu, Instance, MetricSample
from danlu.telemetry.nvml import Nvml

RUN = -1  # the gpu_index of a run's own row (CPU and memory)


@dataclass
class SampleReport:
    at_ms: int
    instances: int = 0
    rows: int = 0
    primed: int = 0  # runs seen for the first time: no rate yet


@dataclass
class _Seen:
    handle: str
    cpu_s: float
    at_ms: int


@dataclass
class Sampler:
    p: Platform
    nvml: Nvml = field(default_factory=Nvml)
    _last: dict[str, _Seen] = field(default_factory=dict)

    def prime(self) -> int:
        """Read the CPU counter of runs not seen yet (every loop tick), so a new run's first
        utilisation sample comes at the next sample, not one period later; returns how many."""
        now = self.p.clock.now_ms()
        with self.p.db.read() as s:
            fresh: list[tuple[str, str]] = [
                (i, h)
                for i, h in s.execute(
                    select(Instance.id, Instance.run_handle).where(
                        Instance.status == Status.RUNNING.value, Instance.run_handle.is_not(None)
                    )
                ).all()
                if h is not None and (i not in self._last or self._last[i].handle != h)
            ]
        if not fresh:
            return 0
        usage = self.p.backend.usage([h for _, h in fresh])
        for inst_id, handle in fresh:
            if handle in usage:
                self._last[inst_id] = _Seen(handle, usage[handle].cpu_s, now)
        return len(fresh)

    def sample(self) -> SampleReport:
        now = self.p.clock.now_ms()
        report = SampleReport(now)
        with self.p.db.read() as s:
            runs = s.execute(
                select(
                    Instance.id,
                    Instance.run_handle,
                    Instance.gpu_count,
                    Instance.sandbox_json,
                    AllocationRow.host_id,
                    AllocationRow.gpu_indices,
                )
                .join(AllocationRow, AllocationRow.id == Instance.current_allocation_id)
                .where(Instance.status == Status.RUNNING.value, Instance.run_handle.is_not(None))
            ).all()
            hosts = {r.host_id for r in runs}
            gpus = {
                (g.host_id, g.idx): (g.uuid, g.simulated)
                for g in s.execute(select(Gpu.host_id, Gpu.idx, Gpu.uuid, Gpu.simulated).where(Gpu.host_id.in_(hosts)))
            }
        usage = self.p.backend.usage([r.run_handle for r in runs]) if runs else {}
        rows: list[dict[str, object]] = []
        alive = set()
        for r in runs:
            alive.add(r.id)
            used = usage.get(r.run_handle)
            if used is None:
                continue
            prev = self._last.get(r.id)
            self._last[r.id] = _Seen(r.run_handle, used.cpu_s, now)
            report.instances += 1
            if prev is None or prev.handle != r.run_handle or now <= prev.at_ms:
                report.primed += 1
                continue
            cores = allotted_cores(r.sandbox_json, r.gpu_count)
            cpu_pm = max(0, round(1000 * (used.cpu_s - prev.cpu_s) / ((now - prev.at_ms) / 1000) / cores))
            run_row = _row(r.id, RUN, now, cpu_pm, used.rss_bytes >> 20, None, None, False)
            run_row["disk_mb"] = None if used.disk_bytes is None else used.disk_bytes >> 20
            run_row["net_rx_bytes"], run_row["net_tx_bytes"] = used.net_rx_bytes, used.net_tx_bytes
            rows.append(run_row)
            for idx in (int(i) for i in r.gpu_indices.split(",") if i):
                uuid, simulated = gpus.get((r.host_id, idx), ("", True))
                reading = None if simulated else self.nvml.read(uuid)
                if reading is not None:
                    rd = reading
                    rows.append(_row(r.id, idx, now, rd.util_pct * 10, rd.mem_mb, rd.power_mw, rd.temp_c, False))
                else:  # simulated (or unreadable): the run's CPU activity stands in, capped at 100 %
                    rows.append(_row(r.id, idx, now, min(1000, cpu_pm), None, None, None, True))
        for gone in set(self._last) - alive:
            del self._last[gone]
        if rows:
            with self.p.db.write() as s:
                s.execute(insert(MetricSample), rows)
        report.rows = len(rows)
        return report


def allotted_cores(sandbox_json: str, gpu_count: int) -> float:
    """The cores a run may use: its cgroup quota (``cpus_milli``), else one per GPU."""
    try:
        milli = int(json.loads(sandbox_json).get("cpus_milli") or 0) if sandbox_json else 0
    except (ValueError, AttributeError):
        milli = 0
    return milli / 1000 if milli > 0 else float(max(1, gpu_count))


def _row(
    instance_id: str,
    gpu_index: int,
    at_ms: int,
    util_pm: int,
    mem_mb: int | None,
    power_mw: int | None,
    temp_c: int | None,
    simulated: bool,
) -> dict[str, object]:
    return {
        "instance_id": instance_id,
        "gpu_index": gpu_index,
        "at_ms": at_ms,
        "res": "raw",
        "samples": 1,
        "util_pm": util_pm,
        "util_max_pm": util_pm,
        "mem_mb": mem_mb,
        "power_mw": power_mw,
        "temp_c": temp_c,
        "simulated": simulated,
        "disk_mb": None,
        "net_rx_bytes": None,
        "net_tx_bytes": None,
    }
