"""The web console: the renter's and the operator's pages in English and 简体中文, served by the
same ``danlu server`` at ``/`` (docs/console.md).

Server-rendered Jinja2 templates with one small script (live status, cost and logs over
server-sent events; confirm dialogs): no build step, no CDN, every asset in this package.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from danlu.console import live, operator, renter
from danlu.console.web import ASSETS

STATIC = Path(__file__).parent / "static"


def page_modules() -> list[str]:
    """Every ``*_pages`` module here (one per group of pages: money, work, teams, tools …), each
    with a ``router``, registered before the renter's, operator's and live routers."""
    here = [m.name for m in pkgutil.iter_modules(__path__) if m.name.endswith("_pages")]
    return sorted(here)


def install(app: FastAPI) -> None:
    app.mount(ASSETS, StaticFiles(directory=STATIC), name="console-assets")
    # The page modules first: their fixed paths (/jobs/new) win over the renter's /jobs/{job_id}.
    for name in page_modules():
        app.include_router(importlib.import_module(f"danlu.console.{name}").router)
    for module in (renter, operator, live):
        app.include_router(module.router)
