"""Telemetry and the event feed (docs/telemetry.md): an instance's samples, ``top`` (the newest
sample of each of my running instances with its cost), ``events``, and the operator's Prometheus
``/metrics``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field

from danlu.api.deps import CurrentUser, PlatformDep, Scraper, get_admin, get_current_user
from danlu.api.schemas.common import InstanceIdPath, errors, limited
from danlu.compute import views
from danlu.core.clock import iso
from danlu.core.money import format_minor
from danlu.notify import feed
from danlu.telemetry import query
from danlu.telemetry.prometheus import CONTENT_TYPE, exposition

router = APIRouter(tags=["telemetry"], responses=errors(401))
metrics_router = APIRouter(tags=["telemetry"], responses=errors(401, 403))

SINCE = r"^([0-9]{1,15}|[1-9][0-9]{0,6}[smhd])$"
Since = Annotated[
    str | None,
    Query(pattern=SINCE, description="From when: a duration back from now (15m, 6h, 7d) or epoch ms; default 1h"),
    limited("invalid_since", "since is a duration back from now such as 15m, 6h or 7d, or epoch ms", pattern=SINCE),
]
RESOLUTION = r"^(raw|1m|1h)$"
Resolution = Annotated[
    str | None,
    Query(pattern=RESOLUTION, description="Only rows of this resolution (default: all, each row says its own)"),
    limited("invalid_resolution", "resolution is raw, 1m or 1h", pattern=RESOLUTION),
]


def _pct(pm: int | None) -> float | None:
    return None if pm is None else pm / 10


class PointOut(BaseModel):
    at: str
    resolution: str
    samples: int = Field(description="raw samples this row averages")
    util_pct: float | None = Field(description="GPU utilisation (the run's row: CPU of its allotted cores)")
    util_max_pct: float | None
    mem_mb: int | None = Field(description="GPU memory used (the run's row: resident memory)")
    power_w: float | None
    temp_c: int | None
    disk_mb: int | None = Field(None, description="the run's row: its workspace on disk")
    net_rx_bytes: int | None = Field(None, description="the run's row: bytes received so far (own network only)")
    net_tx_bytes: int | None = Field(None, description="the run's row: bytes sent so far (own network only)")


class SeriesOut(BaseModel):
    gpu_index: int
    simulated: bool = Field(description="utilisation derived from the run's CPU activity, not measured on a GPU")
    points: list[PointOut]


class MetricsOut(BaseModel):
    instance_id: str
    since: str
    until: str
    gpus: list[SeriesOut]
    run: SeriesOut = Field(description="the run's own CPU % (of its allotted cores) and resident memory")


def _series(s: query.Series) -> SeriesOut:
    return SeriesOut(
        gpu_index=s.gpu_index,
        simulated=s.simulated,
        points=[
            PointOut(
                at=iso(pt.at_ms) or "",
                resolution=pt.res,
                samples=pt.samples,
                util_pct=_pct(pt.util_pm),
                util_max_pct=_pct(pt.util_max_pm),
                mem_mb=pt.mem_mb,
                power_w=None if pt.power_mw is None else pt.power_mw / 1000,
                temp_c=pt.temp_c,
                disk_mb=pt.disk_mb,
                net_rx_bytes=pt.net_rx_bytes,
                net_tx_bytes=pt.net_tx_bytes,
            )
            for pt in s.points
        ],
    )


@router.get("/instances/{instance_id}/metrics", response_model=MetricsOut, responses=errors(404, 422))
def instance_metrics(
    instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser, since: Since = None, resolution: Resolution = None
) -> MetricsOut:
    """What was measured of an instance: per GPU utilisation, memory, power and temperature (real
    GPUs through NVML; simulated ones from the run's CPU, marked so) and the run's CPU and memory."""
    m = query.instance_metrics(p, user, instance_id, query.parse_since(since, p.clock.now_ms()), resolution)
    return MetricsOut(
        instance_id=m.instance_id,
        since=iso(m.since_ms) or "",
        until=iso(m.until_ms) or "",
        gpus=[_series(g) for g in m.gpus],
        run=_series(m.run),
    )


class TopRow(BaseModel):
    id: str
    name: str
    status: str
    gpu_model: str
    gpu_count: int
    simulated: bool
    gpu_util_pct: float | None = Field(description="mean over its GPUs, newest sample")
    gpu_mem_mb: int | None
    power_w: float | None
    cpu_pct: float | None
    rss_mb: int | None
    disk_mb: int | None = Field(None, description="its workspace on disk")
    net_rx_bytes: int | None = Field(None, description="bytes received so far (a network of its own only)")
    net_tx_bytes: int | None = Field(None, description="bytes sent so far (a network of its own only)")
    sampled_at: str | None
    cost: str = Field(description="cost so far")
    cost_per_hour: str | None = Field(description="what it costs per hour now (all its GPUs; prepaid: 0)")
    currency: str
    idle_stop_s: int | None
    max_duration_s: int | None


@router.get("/top", response_model=list[TopRow])
def top(p: PlatformDep, user: CurrentUser) -> list[TopRow]:
    """Each of my (and my teams') instances that is not destroyed, with its newest sample and cost."""
    vs = [v for v in views.list_instances(p, user) if v.status in ("running", "pending", "stopping")]
    newest = query.latest(p, [v.id for v in vs])
    out = []
    for v in vs:
        n = newest.get(v.id)
        hourly = None
        if v.price_per_hour_minor is not None:
            hourly = format_minor(0 if v.hold_id else v.price_per_hour_minor * v.gpu_count, v.currency)
        out.append(
            TopRow(
                id=v.id,
                name=v.name,
                status=v.status,
                gpu_model=v.gpu_model,
                gpu_count=v.gpu_count,
                simulated=v.simulated,
                gpu_util_pct=_pct(n.gpu_util_pm) if n else None,
                gpu_mem_mb=n.gpu_mem_mb if n else None,
                power_w=None if n is None or n.power_mw is None else n.power_mw / 1000,
                cpu_pct=_pct(n.cpu_pm) if n else None,
                rss_mb=n.rss_mb if n else None,
                disk_mb=n.disk_mb if n else None,
                net_rx_bytes=n.net_rx_bytes if n else None,
                net_tx_bytes=n.net_tx_bytes if n else None,
                sampled_at=iso(n.at_ms) if n else None,
                cost=format_minor(v.cost_minor, v.currency),
                cost_per_hour=hourly,
                currency=v.currency,
                idle_stop_s=v.idle_stop_s,
                max_duration_s=v.max_duration_s,
            )
        )
    return out


class FeedEventOut(BaseModel):
    id: int = Field(description="increasing; pass the newest as `after` to poll for new ones")
    kind: str
    message: str
    instance_id: str | None
    at: str


KIND = r"^[a-z_]{1,32}$"


@router.get("/events", response_model=list[FeedEventOut], responses=errors(422))
def events(
    p: PlatformDep,
    user: CurrentUser,
    after: Annotated[int, Query(ge=0, le=2**31 - 1, description="Only events with a larger id")] = 0,
    limit: Annotated[int, Query(ge=1, le=feed.MAX_LIMIT, description="Newest first, at most this many")] = 100,
    kind: Annotated[
        str | None,
        Query(pattern=KIND, description="Only this kind, e.g. idle_stop, budget_threshold"),
        limited("invalid_kind", "kind is a word of lowercase letters and _, e.g. idle_stop", pattern=KIND),
    ] = None,
) -> list[FeedEventOut]:
    """What the platform told me and the accounts I manage: idle stops, budget thresholds, holds
    ending, storage warnings, team changes. Newest first."""
    return [
        FeedEventOut(id=e.id, kind=e.kind, message=e.message, instance_id=e.instance_id, at=iso(e.at_ms) or "")
        for e in feed.feed(p, user, after=after, limit=limit, kind=kind)
    ]


LOOPBACK = ("127.0.0.1", "::1", "localhost")
# Headers a reverse proxy adds: a request carrying one came through a proxy, whatever address it
# came from (a proxy on this machine connects from loopback on behalf of anyone).
FORWARDED = (b"forwarded", b"x-forwarded-for", b"x-forwarded-host", b"x-real-ip")


async def metrics_reader(request: Request) -> None:
    """A scraper on the server's own machine reads /metrics without a token (as Prometheus on the
    host, and `curl localhost:8000/metrics`); from anywhere else, and through any reverse proxy, it
    takes the admin token. Renters' sandboxes cannot reach the host's loopback (slirp4netns
    --disable-host-loopback)."""
    client = request.client
    proxied = any(name in FORWARDED for name, _ in request.scope["headers"])
    if client is not None and client.host in LOOPBACK and not proxied:
        return
    await get_admin(await get_current_user(request))


@metrics_router.get("/metrics", response_class=Response, dependencies=[Scraper, Depends(metrics_reader)])
def prometheus(p: PlatformDep, request: Request) -> Response:
    """Prometheus text format: GPU and run utilisation per instance, fleet and money series, the
    build, the backend, and this process's HTTP requests. Open to the server's own machine; from
    elsewhere or through a proxy, the admin token (it names every tenant's instances)."""
    requests = getattr(request.app.state, "http_metrics", None)
    return Response(exposition(p, *([requests] if requests else [])), media_type=CONTENT_TYPE)
