"""The FastAPI application: REST under /api/v1, OpenAPI at /openapi.json, /healthz, and the API's
documentation at /docs and /redoc, served offline: their scripts come from an installed package
(fastapi-offline's copy of swagger-ui and redoc), not from a CDN."""

from __future__ import annotations

from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import Depends, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from danlu import __version__
from danlu.access import sessions
from danlu.access.transfer import Transfers
from danlu.accounts.payers import currency
from danlu.advisor.plans import PlatformPlans, offpeak_window
from danlu.api import errors
from danlu.api.deps import BEARER_SCHEME, Public, get_current_user
from danlu.api.hot import HotReads
from danlu.api.routers import account, admin, advice, images, instances, jobs, offers, operator
from danlu.api.routers import budgets as budgets_router
from danlu.api.routers import credentials as credentials_router
from danlu.api.routers import files as files_router
from danlu.api.routers import holds as holds_router
from danlu.api.routers import invoices as invoice_routes
from danlu.api.routers import ports as ports_router
from danlu.api.routers import sessions as sessions_router
from danlu.api.routers import snapshots as snapshots_router
from danlu.api.routers import ssh_keys as ssh_keys_router
from danlu.api.routers import storage as storage_router
from danlu.api.routers import student as student_router
from danlu.api.routers import tariffs as tariffs_router
from danlu.api.routers import teams as teams_router
from danlu.api.routers import telemetry as telemetry_router
from danlu.api.routers import vouchers as vouchers_router
from danlu.api.routers import webhooks as webhooks_router
from danlu.api.schemas.common import AMOUNT, POSITIVE_AMOUNT, amount_pattern
from danlu.billing import tariffs, terms
from danlu.compute.offers import list_offers
from danlu.context import Platform
from danlu.core.money import exponent
from danlu.telemetry import http_metrics, readiness

API_PREFIX = "/api/v1"


class HealthOut(BaseModel):
    status: str
    version: str


class CheckOut(BaseModel):
    ok: bool
    detail: str


class ReadyOut(BaseModel):
    status: str  # ready | not_ready
    checks: dict[str, CheckOut]


DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs-assets"


def create_api(platform: Platform, loop: Any = None) -> FastAPI:
    """The API alone; the server's app adds the web console (danlu.server.app)."""
    app = FastAPI(
        title="danlu",
        version=__version__,
        description="GPU rental: pay only for useful GPU time",
        docs_url=None,
        redoc_url=None,
    )
    app.state.platform = platform
    app.state.loop = loop
    errors.install(app)
    app.add_middleware(HotReads, platform=platform)  # innermost: polled reads answered from memory (api/hot.py)
    app.add_middleware(errors.BodyLimit)
    app.state.http_metrics = http_metrics.RequestMetrics()  # outermost: it times what the rest does
    app.add_middleware(http_metrics.MetricsMiddleware, metrics=app.state.http_metrics)
    for module in (offers, instances, jobs, images, account, admin, operator):
        app.include_router(module.router, prefix=API_PREFIX)
    for extra in (teams_router, vouchers_router, holds_router):  # issue 9: teams, vouchers, packages
        app.include_router(extra.router, prefix=API_PREFIX)
        app.include_router(extra.admin_router, prefix=API_PREFIX)
    app.include_router(invoice_routes.router, prefix=API_PREFIX)
    for money in (budgets_router, student_router, tariffs_router):  # issue 9: money controls
        app.include_router(money.router, prefix=API_PREFIX)
    for admin_only in (student_router, tariffs_router, storage_router):
        app.include_router(admin_only.admin_router, prefix=API_PREFIX)
    app.include_router(advice.router, prefix=API_PREFIX, dependencies=[Depends(get_current_user)])
    app.include_router(telemetry_router.router, prefix=API_PREFIX)  # issue 10: metrics, top, events
    app.include_router(telemetry_router.metrics_router)  # Prometheus scrapes /metrics
    app.include_router(webhooks_router.router, prefix=API_PREFIX)
    app.include_router(credentials_router.router, prefix=API_PREFIX)  # issue 12: passwords, named tokens
    app.include_router(instances.stream_router, prefix=API_PREFIX)  # issue 12: server-sent events
    app.include_router(sessions_router.router, prefix=API_PREFIX)  # issue 25: exec and shell sessions
    app.include_router(sessions_router.jobs_router, prefix=API_PREFIX)
    app.include_router(ports_router.router, prefix=API_PREFIX)  # issue 25: the renter's web apps
    app.include_router(ssh_keys_router.router, prefix=API_PREFIX)  # issue 25: keys for the SSH gateway
    app.include_router(snapshots_router.router, prefix=API_PREFIX)  # issue 26: snapshots of workspaces
    app.include_router(files_router.router, prefix=API_PREFIX)  # issue 26: files in and out over HTTP
    app.include_router(files_router.list_router, prefix=API_PREFIX)
    # /p/{id}/{port}/…: first, so a proxied request is not matched against every API route before
    # (and before the console's catch-alls); no other route starts with /p/ or /pa/.
    app.router.routes[:0] = ports_router.ROUTES
    app.state.sessions = sessions.Registry()
    app.state.transfers = Transfers(platform, app.state.sessions)  # stopped rentals' files (access/transfer.py)
    platform.end_transfers = app.state.transfers.end
    if platform.settings.ssh_port is not None:  # the SSH gateway lives and dies with the app
        from danlu.access.ssh import SshGateway

        gateway = SshGateway(platform, app.state.sessions, platform.settings.ssh_host, platform.settings.ssh_port)
        app.state.ssh = gateway
        app.router.on_startup.append(gateway.start)
        app.router.on_shutdown.append(gateway.stop)
    app.state.platform_offers = lambda: list_offers(platform)
    app.state.platform_plans = lambda: platform_plans_for_advice(platform)

    install_docs(app)
    install_openapi(app, platform)

    @app.get("/healthz", response_model=HealthOut, dependencies=[Public])
    def healthz() -> HealthOut:
        with platform.db.read() as s:
            s.connection().exec_driver_sql("SELECT 1")
        return HealthOut(status="ok", version=__version__)

    @app.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut}}, dependencies=[Public])
    def readyz() -> JSONResponse:
        """200 when the database, the backend, the control loop and the sandbox all answer; else 503
        (danlu.telemetry.readiness)."""
        found = readiness.checks(platform)
        out = ReadyOut(
            status="ready" if all(c.ok for c in found) else "not_ready",
            checks={c.name: CheckOut(ok=c.ok, detail=c.detail) for c in found},
        )
        return JSONResponse(out.model_dump(), status_code=200 if out.status == "ready" else 503)

    return app


@cache
def _redoc_js() -> bytes:
    """ReDoc's bundle with its one CDN URL (the footer logo) pointing at the local favicon; read on
    the first request for it, not at every app's start."""
    js = (DOCS_ASSETS / "redoc.standalone.js").read_bytes()
    return js.replace(b"https://cdn.redoc.ly/redoc/logo-mini.svg", f"{ASSETS_URL}/favicon.png".encode())


def install_docs(app: FastAPI) -> None:
    """/docs (Swagger UI) and /redoc with their JS and CSS served from ``ASSETS_URL``. Nothing is
    fetched from the network at run time: ReDoc's bundle draws its footer logo from cdn.redoc.ly,
    so it is served with that one URL pointing at the local favicon (the bundle is otherwise
    fastapi-offline's, unchanged), and Swagger UI's validator badge, which sends the document's URL
    to validator.swagger.io, is off."""

    @app.get(f"{ASSETS_URL}/redoc.standalone.js", include_in_schema=False, dependencies=[Public])
    async def redoc_bundle() -> Response:
        return Response(_redoc_js(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"})

    app.mount(ASSETS_URL, StaticFiles(directory=DOCS_ASSETS), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False, dependencies=[Public])
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False, dependencies=[Public])
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )


def install_openapi(app: FastAPI, platform: Platform) -> None:
    """The OpenAPI document, stating money amounts with this deployment's decimal places (the
    models' own patterns allow up to 6; parse_amount then holds each to the currency's), and the
    bearer scheme on every operation that needs a token."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = default()
            with platform.db.read() as s:
                exp = exponent(currency(s))
            swap = {AMOUNT: amount_pattern(exp), POSITIVE_AMOUNT: amount_pattern(exp, positive=True)}
            swap[POSITIVE_AMOUNT.replace("^(", "^(0|", 1)] = amount_pattern(exp, positive=True).replace("^(", "^(0|", 1)
            _swap_patterns(doc, swap)
            _declare_bearer(app, doc)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _declare_bearer(app: FastAPI, doc: dict[str, Any]) -> None:
    doc.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = BEARER_SCHEME
    for ctx in iter_route_contexts(app.routes):
        route = ctx.original_route
        if not isinstance(route, APIRoute):
            continue
        if _needs_token(getattr(ctx, "dependant", route.dependant)):
            for method in ctx.methods or ():
                op = doc["paths"].get(str(ctx.path), {}).get(method.lower())
                if op is not None:
                    op["security"] = [{"bearer": []}]


def _needs_token(dependant: Dependant) -> bool:
    return any(d.call is get_current_user or _needs_token(d) for d in dependant.dependencies)


def _swap_patterns(node: object, swap: dict[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str) and value in swap:
                node[key] = swap[value]
            else:
                _swap_patterns(value, swap)
    elif isinstance(node, list):
        for item in node:
            _swap_patterns(item, swap)


def platform_plans_for_advice(p: Platform) -> PlatformPlans:
    """The packages and reserved commitments on sale here, and the operator's cheaper time-of-day tariffs as
    one off-peak window (``plans.offpeak_window``), for the advisor's ranking and plans. (Until issue 11's
    last stop the off-peak plan was never set here, so tariffs never reached the advisor.)"""
    rules = [(len(r.days), r.start, r.end, Decimal(r.multiplier), r.plans) for r in tariffs.list_rules(p)]
    window = offpeak_window(rules)
    on_sale = {v.term: v.discount_bp for v in terms.list_terms(p)}
    if window is None:
        return PlatformPlans(terms=on_sale)
    return PlatformPlans(offpeak_discount_pct=window[0], offpeak_hours_per_day=window[1], terms=on_sale)
