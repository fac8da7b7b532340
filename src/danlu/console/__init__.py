"""The web console: the renter's and the operator's pages in English and 简体中文, served by the
same ``danlu server`` at ``/`` (docs/console.md).

Server-rendered Jinja2 templates with one small script (live status, cost and logs over
server-sent events; confirm dialogs): no build step, no CDN, every asset in this package.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from danlu.console import live, operator, renter
from danlu.console.web import ASSETS

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    app.mount(ASSETS, StaticFiles(directory=STATIC), name="console-assets")
    for module in (renter, operator, live):
        app.include_router(module.router)
