"""The server's one ASGI app: the API (danlu.api.app) with the web console at ``/`` (danlu.console)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from danlu import console
from danlu.api.app import create_api
from danlu.context import Platform


def create_app(platform: Platform, loop: Any = None) -> FastAPI:
    app = create_api(platform, loop)
    console.install(app)  # issue 12: the web console at /
    return app
