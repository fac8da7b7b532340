"""The server's own HTTP traffic for ``/metrics`` (issue 28, finding 9): requests by method, route
and status, and how long they took, as an ASGI middleware counts them in this process. The same
middleware gives each request its id and writes the access log (danlu.telemetry.logs).

Labelled by the **route template** (``/api/v1/instances/{instance_id}``), never the raw path, so a
scanner or a renter's proxied app cannot grow the series without bound; a request no route
matched is ``route="unmatched"``. WebSockets (shells, proxied sockets) are not requests and are
not counted here. The counts live in the server process (as every Prometheus client library's
do): each server on a database exposes its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from fastapi.routing import iter_route_contexts
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from danlu.telemetry import logs

# Seconds; prometheus-client's default buckets, which cover a 5 ms health check to a 10 s report.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
UNMATCHED = "unmatched"

Scope = dict[str, Any]
Message = dict[str, Any]


class RequestMetrics(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: dict[tuple[str, str, str], int] = {}
        # (method, route) -> (count per bucket, sum of seconds, count)
        self._time: dict[tuple[str, str], tuple[list[int], float, int]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            key = (method, route, str(status))
            self._count[key] = self._count.get(key, 0) + 1
            buckets, total, n = self._time.get((method, route)) or ([0] * len(BUCKETS), 0.0, 0)
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    buckets[i] += 1
            self._time[(method, route)] = (buckets, total + seconds, n + 1)

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        requests = CounterMetricFamily(
            "danlu_http_requests", "HTTP requests this server process answered", labels=["method", "route", "status"]
        )
        duration = HistogramMetricFamily(
            "danlu_http_request_duration_seconds",
            "time from a request's arrival to its response's last byte, in this server process",
            labels=["method", "route"],
        )
        with self._lock:
            for (method, route, status), n in sorted(self._count.items()):
                requests.add_metric([method, route, status], n)
            for (method, route), (buckets, total, n) in sorted(self._time.items()):
                cumulative = [(str(bound), count) for bound, count in zip(BUCKETS, buckets, strict=True)]
                duration.add_metric([method, route], [*cumulative, ("+Inf", n)], total)
        yield requests
        yield duration


class MetricsMiddleware:
    """Times each HTTP request and counts it under the route the router matched (``scope["route"]``,
    set in place while the request is handled). FastAPI puts there the route as its router declared
    it (``/instances/{instance_id}``); the template with the prefix it was included under comes
    from the app's route contexts, looked up once per route."""

    def __init__(self, app: Any, metrics: RequestMetrics) -> None:
        self.app, self.metrics = app, metrics
        self._templates: dict[int, str] = {}

    def template(self, scope: Scope) -> str:
        route = scope.get("route")
        if route is None:
            return UNMATCHED
        found = self._templates.get(id(route))
        if found is None:
            for ctx in iter_route_contexts(scope["app"].routes):
                if ctx.path_format is not None:
                    self._templates.setdefault(id(ctx.original_route), ctx.path_format)
            found = self._templates.setdefault(id(route), getattr(route, "path", None) or UNMATCHED)
        return found

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            rid = logs.request_id(_header(scope, b"x-request-id"))  # a WebSocket's lines name it too
            token = logs.REQUEST_ID.set(rid)
            try:
                await self.app(scope, receive, send)
            finally:
                logs.REQUEST_ID.reset(token)
            return
        started = time.perf_counter()
        status = 500  # an exception before the response started is answered 500 by the server
        rid = logs.request_id(_header(scope, b"x-request-id"))
        token = logs.REQUEST_ID.set(rid)

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds, route, method = time.perf_counter() - started, self.template(scope), scope.get("method", "GET")
            self.metrics.observe(method, route, status, seconds)
            client = scope.get("client")
            logs.access(method, route, scope.get("path", ""), status, seconds, client[0] if client else None, rid)
            logs.REQUEST_ID.reset(token)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None
