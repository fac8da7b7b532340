"""``GET /metrics`` in the Prometheus text format (``prometheus-client``), for the operator: the
newest sample of every running instance's GPUs and processes, the fleet (GPUs, running instances,
queued jobs) and the money (revenue, usage billed). Read from the database at each scrape, so any
server process answers the same. Operator-only: it names every tenant's instances.

An example Grafana dashboard over these series is ``docs/grafana-dashboard.json``."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu import __version__
from danlu.compute.lifecycle import Status
from danlu.context import Platform
from danlu.db.models import Account, AllocationRow, Gpu, Instance, Job, MetricSample, UsageRecordRow
from danlu.scheduling.jobs import QUEUED
from danlu.telemetry.sampler import RUN

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The label naming a danlu instance. Not ``instance``: Prometheus gives every scraped series its
# own ``instance`` (the target's host:port) and renames a clashing one to ``exported_instance``.
INSTANCE = "instance_id"


class PlatformCollector(Collector):
    def __init__(self, p: Platform) -> None:
        self.p = p

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        with self.p.db.read() as s:
            families = [*_samples(s), *_platform(s)]  # read in one transaction, yielded after it
        yield from families
        yield from self._server()

    def _server(self) -> Iterator[GaugeMetricFamily]:
        """What is running and whether its backend answers (Slurm: ``scontrol ping``)."""
        info = GaugeMetricFamily("danlu_build_info", "this server's version (always 1)", labels=["version", "python"])
        info.add_metric([__version__, platform.python_version()], 1)
        yield info
        reason = self.p.backend.unavailable()
        up = GaugeMetricFamily(
            "danlu_backend_up", "1 while the compute backend answers, 0 while it does not", labels=["backend"]
        )
        up.add_metric([self.p.backend.name], 0 if reason else 1)
        yield up


def _samples(s: Session) -> list[GaugeMetricFamily | CounterMetricFamily]:
    """Each running instance's newest raw sample: its GPUs' utilisation, memory, power and temperature, and
    the run's CPU, memory, disk and network."""
    gpu = [INSTANCE, "gpu", "model", "simulated"]
    util = GaugeMetricFamily("danlu_gpu_utilization_ratio", "GPU utilisation of a running instance", labels=gpu)
    mem = GaugeMetricFamily("danlu_gpu_memory_used_bytes", "GPU memory used (real GPUs only)", labels=gpu)
    power = GaugeMetricFamily("danlu_gpu_power_watts", "GPU power draw (real GPUs only)", labels=gpu)
    temp = GaugeMetricFamily("danlu_gpu_temperature_celsius", "GPU temperature (real GPUs only)", labels=gpu)
    inst = [INSTANCE]
    cpu = GaugeMetricFamily("danlu_instance_cpu_ratio", "CPU used by a run, of its allotted cores", labels=inst)
    rss = GaugeMetricFamily("danlu_instance_memory_bytes", "resident memory of a run's processes", labels=inst)
    disk = GaugeMetricFamily("danlu_instance_disk_bytes", "a run's workspace on disk", labels=inst)
    rx = CounterMetricFamily(
        "danlu_instance_network_receive_bytes", "bytes a run received (its own network namespace)", labels=inst
    )
    tx = CounterMetricFamily(
        "danlu_instance_network_transmit_bytes", "bytes a run sent (its own network namespace)", labels=inst
    )
    running = dict(
        s.execute(select(Instance.id, Instance.gpu_model).where(Instance.status == Status.RUNNING.value)).all()
    )
    newest = (
        select(MetricSample.instance_id, func.max(MetricSample.at_ms).label("at"))
        .where(MetricSample.res == "raw", MetricSample.instance_id.in_(list(running)))
        .group_by(MetricSample.instance_id)
        .subquery()
    )
    samples = s.scalars(
        select(MetricSample).join(
            newest, (newest.c.instance_id == MetricSample.instance_id) & (newest.c.at == MetricSample.at_ms)
        )
    ).all()
    for m in samples:
        if m.res != "raw":
            continue
        if m.gpu_index == RUN:
            if m.util_pm is not None:
                cpu.add_metric([m.instance_id], m.util_pm / 1000)
            if m.mem_mb is not None:
                rss.add_metric([m.instance_id], m.mem_mb * 2**20)
            if m.disk_mb is not None:
                disk.add_metric([m.instance_id], m.disk_mb * 2**20)
            if m.net_rx_bytes is not None and m.net_tx_bytes is not None:
                rx.add_metric([m.instance_id], m.net_rx_bytes)
                tx.add_metric([m.instance_id], m.net_tx_bytes)
            continue
        labels = [m.instance_id, str(m.gpu_index), running.get(m.instance_id, ""), str(m.simulated).lower()]
        if m.util_pm is not None:
            util.add_metric(labels, m.util_pm / 1000)
        if m.mem_mb is not None:
            mem.add_metric(labels, m.mem_mb * 2**20)
        if m.power_mw is not None:
            power.add_metric(labels, m.power_mw / 1000)
        if m.temp_c is not None:
            temp.add_metric(labels, m.temp_c)
    return [util, mem, power, temp, cpu, rss, disk, rx, tx]


def _platform(s: Session) -> list[GaugeMetricFamily | CounterMetricFamily]:
    """The platform's totals: GPUs and those allocated, instances by status, the queue, revenue, usage billed."""
    gpus_total = GaugeMetricFamily("danlu_gpus", "GPUs on the platform", labels=["model", "simulated"])
    for model, simulated, n in s.execute(
        select(Gpu.model, Gpu.simulated, func.count()).group_by(Gpu.model, Gpu.simulated)
    ):
        gpus_total.add_metric([model, str(simulated).lower()], n)
    busy = GaugeMetricFamily("danlu_gpus_allocated", "GPUs in open allocations", labels=["model"])
    for model, n in s.execute(
        select(Instance.gpu_model, func.sum(AllocationRow.gpu_count))
        .join(Instance, Instance.id == AllocationRow.instance_id)
        .where(AllocationRow.ended_at_ms.is_(None))
        .group_by(Instance.gpu_model)
    ):
        busy.add_metric([model], int(n or 0))
    statuses = GaugeMetricFamily("danlu_instances", "instances by status", labels=["status"])
    for status, n in s.execute(
        select(Instance.status, func.count()).where(Instance.status != Status.DESTROYED.value).group_by(Instance.status)
    ):
        statuses.add_metric([status], n)
    queue = GaugeMetricFamily("danlu_jobs_queued", "batch jobs waiting in the queue")
    queue.add_metric([], s.execute(select(func.count()).select_from(Job).where(Job.status == QUEUED)).scalar_one())
    revenue = GaugeMetricFamily(
        "danlu_revenue_minor", "money earned, in the currency's minor unit (refunds subtract)", labels=["currency"]
    )
    for cur, bal in s.execute(
        select(Account.currency, func.sum(Account.balance_minor))
        .where(Account.kind == "revenue")
        .group_by(Account.currency)
    ):
        revenue.add_metric([cur], int(bal or 0))
    spent = CounterMetricFamily("danlu_usage_billed_minor", "GPU and storage usage billed (vouchers and cash)")
    spent.add_metric([], int(s.execute(select(func.coalesce(func.sum(UsageRecordRow.amount_minor), 0))).scalar_one()))
    return [gpus_total, busy, statuses, queue, revenue, spent]


def exposition(p: Platform, *more: Collector) -> bytes:
    """The platform's series, then ``more`` (this process's HTTP requests, danlu.telemetry.http_metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PlatformCollector(p))
    for collector in more:
        registry.register(collector)
    return generate_latest(registry)
