"""The FastAPI application: REST under /api/v1, OpenAPI at /openapi.json, /healthz."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from danlu import __version__
from danlu.advisor.deps import get_platform_offers
from danlu.advisor.plans import PlatformOffer
from danlu.api import errors
from danlu.api.deps import PlatformDep, get_current_user
from danlu.api.routers import account, admin, advice, images, instances, jobs, offers, operator
from danlu.compute.offers import list_offers
from danlu.context import Platform

API_PREFIX = "/api/v1"


def create_app(platform: Platform, loop: Any = None) -> FastAPI:
    app = FastAPI(title="danlu", version=__version__, description="GPU rental: pay only for useful GPU time")
    app.state.platform = platform
    app.state.loop = loop
    errors.install(app)
    for module in (offers, instances, jobs, images, account, admin, operator):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(advice.router, prefix=API_PREFIX, dependencies=[Depends(get_current_user)])
    app.dependency_overrides[get_platform_offers] = platform_offers_for_advice

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        with platform.db.read() as s:
            s.connection().exec_driver_sql("SELECT 1")
        return {"status": "ok", "version": __version__}

    return app


def platform_offers_for_advice(p: PlatformDep) -> list[PlatformOffer]:
    """This platform's priced offers, for the advisor to rank beside the public catalog."""
    return [
        PlatformOffer(o.gpu_model, o.price_per_hour_minor, o.currency, o.free, o.total)
        for o in list_offers(p)
        if o.price_per_hour_minor is not None
    ]
