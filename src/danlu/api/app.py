"""The FastAPI application: REST under /api/v1, OpenAPI at /openapi.json, /healthz."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from danlu import __version__
from danlu.api import errors
from danlu.api.routers import account, admin, instances, offers
from danlu.context import Platform

API_PREFIX = "/api/v1"


def create_app(platform: Platform, loop: Any = None) -> FastAPI:
    app = FastAPI(title="danlu", version=__version__, description="GPU rental: pay only for useful GPU time")
    app.state.platform = platform
    app.state.loop = loop
    errors.install(app)
    for module in (offers, instances, account, admin):
        app.include_router(module.router, prefix=API_PREFIX)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        with platform.db.read() as s:
            s.connection().exec_driver_sql("SELECT 1")
        return {"status": "ok", "version": __version__}

    return app
