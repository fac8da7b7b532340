"""Reading the samples back (docs/telemetry.md): one instance's series for the API, the chart and
``danlu top``. Only the renter (or their team) sees an instance's metrics; anyone else gets 404."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import func, select

from danlu.compute import views
from danlu.compute.limits import parse_seconds
from danlu.context import Platform
from danlu.core.errors import InvalidInput
from danlu.db.models import MetricSample, User
from danlu.telemetry.sampler import RUN

RESOLUTIONS = ("raw", "1m", "1h")
MAX_POINTS = 20_000  # per series: a week of 1-minute rows is 10,080


@dataclass(frozen=True)
class Point:
    at_ms: int
    res: str
    samples: int
    util_pm: int | None
    util_max_pm: int | None
    mem_mb: int | None
    power_mw: int | None
    temp_c: int | None
    disk_mb: int | None = None  # the run's row only: its workspace
    net_rx_bytes: int | None = None  # the run's row only: its own network's bytes so far
    net_tx_bytes: int | None = None


@dataclass
class Series:
    """One GPU's samples (``gpu_index`` ≥ 0), or the run's own (−1: CPU in util, RSS in mem)."""

    gpu_index: int
    simulated: bool
    points: list[Point] = field(default_factory=list)


@dataclass
class InstanceMetrics:
    instance_id: str
    since_ms: int
    until_ms: int
    gpus: list[Series]
    run: Series


def parse_since(text: str | None, now_ms: int) -> int:
    """``since``: a duration back from now (``15m``, ``6h``, ``7d``) or epoch milliseconds; default 1 h."""
    if text is None or text == "":
        return now_ms - 3_600_000
    if text.isdigit():
        return int(text)
    return now_ms - parse_seconds(text, "invalid_since", "since") * 1000


def instance_metrics(
    p: Platform, user: User, instance_id: str, since_ms: int, resolution: str | None = None
) -> InstanceMetrics:
    """Every stored sample of the instance from ``since_ms`` on, at whatever resolution retention
    has left it (raw for the last hour, then 1-minute, then 1-hour rows), or only ``resolution``."""
    if resolution is not None and resolution not in RESOLUTIONS:
        raise InvalidInput("invalid_resolution", f"resolution is one of {', '.join(RESOLUTIONS)}")
    now = p.clock.now_ms()
    with p.db.read() as s:
        inst = views.get_owned(s, user, instance_id)  # 404 for anyone else's
        stmt = (
            select(MetricSample)
            .where(MetricSample.instance_id == inst.id, MetricSample.at_ms >= since_ms)
            .order_by(MetricSample.gpu_index, MetricSample.at_ms)
        )
        if resolution is not None:
            stmt = stmt.where(MetricSample.res == resolution)
        by_gpu: dict[int, Series] = {}
        for m in s.scalars(stmt):
            series = by_gpu.setdefault(m.gpu_index, Series(m.gpu_index, False))
            series.simulated = series.simulated or m.simulated
            series.points.append(
                Point(
                    m.at_ms,
                    m.res,
                    m.samples,
                    m.util_pm,
                    m.util_max_pm,
                    m.mem_mb,
                    m.power_mw,
                    m.temp_c,
                    m.disk_mb,
                    m.net_rx_bytes,
                    m.net_tx_bytes,
                )
            )
    for series in by_gpu.values():
        series.points.sort(key=lambda pt: pt.at_ms)  # 1h, 1m and raw rows interleave by time
        del series.points[:-MAX_POINTS]
    run = by_gpu.pop(RUN, Series(RUN, False))
    return InstanceMetrics(inst.id, since_ms, now, [by_gpu[k] for k in sorted(by_gpu)], run)


@dataclass(frozen=True)
class Latest:
    """The newest raw sample of one running instance, for ``danlu top``."""

    gpu_util_pm: int | None  # the mean over its GPUs
    gpu_mem_mb: int | None  # the sum over its GPUs (None when simulated)
    power_mw: int | None
    cpu_pm: int | None
    rss_mb: int | None
    simulated: bool
    at_ms: int | None
    disk_mb: int | None = None
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None


def latest(p: Platform, instance_ids: list[str]) -> dict[str, Latest]:
    """The newest raw sample of each instance (callers pass only ids the user may see)."""
    if not instance_ids:
        return {}
    with p.db.read() as s:
        newest = (
            select(MetricSample.instance_id, func.max(MetricSample.at_ms).label("at"))
            .where(MetricSample.instance_id.in_(instance_ids), MetricSample.res == "raw")
            .group_by(MetricSample.instance_id)
            .subquery()
        )
        rows = s.execute(
            select(MetricSample).join(
                newest, (newest.c.instance_id == MetricSample.instance_id) & (newest.c.at == MetricSample.at_ms)
            )
        ).scalars()
        grouped: dict[str, list[MetricSample]] = defaultdict(list)
        for m in rows:
            if m.res == "raw":
                grouped[m.instance_id].append(m)
    out = {}
    for inst_id, ms in grouped.items():
        gpus = [m for m in ms if m.gpu_index != RUN]
        run = next((m for m in ms if m.gpu_index == RUN), None)
        utils = [m.util_pm for m in gpus if m.util_pm is not None]
        mems = [m.mem_mb for m in gpus if m.mem_mb is not None]
        powers = [m.power_mw for m in gpus if m.power_mw is not None]
        out[inst_id] = Latest(
            gpu_util_pm=sum(utils) // len(utils) if utils else None,
            gpu_mem_mb=sum(mems) if mems else None,
            power_mw=sum(powers) if powers else None,
            cpu_pm=run.util_pm if run else None,
            rss_mb=run.mem_mb if run else None,
            simulated=any(m.simulated for m in gpus),
            at_ms=ms[0].at_ms,
            disk_mb=run.disk_mb if run else None,
            net_rx_bytes=run.net_rx_bytes if run else None,
            net_tx_bytes=run.net_tx_bytes if run else None,
        )
    return out
