"""Typed errors → HTTP, in one place. Every error body is ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from danlu.core.errors import DanluError

log = logging.getLogger(__name__)


def _body(code: str, message: str, **details: object) -> dict[str, object]:
    err: dict[str, object] = {"code": code, "message": message}
    if details:
        err["details"] = details
    return {"error": err}


def install(app: FastAPI) -> None:
    @app.exception_handler(DanluError)
    async def _danlu(_: Request, exc: DanluError) -> JSONResponse:
        return JSONResponse(status_code=exc.http_status, content={"error": exc.to_dict()})

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse(
                status_code=400, content=_body("malformed_json", "the request body is not valid JSON; fix it and retry")
            )
        own = next((e for e in errors if (e.get("ctx") or {}).get("danlu_code")), None)
        if own is not None:  # a limit with its own stable code (danlu.api.schemas.limited)
            return JSONResponse(status_code=422, content=_body(str(own["ctx"]["danlu_code"]), str(own["msg"])))
        parts = []
        for e in errors[:5]:
            loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{loc or 'body'}: {e.get('msg', 'invalid')}")
        return JSONResponse(
            status_code=422,
            content=_body("invalid_request", "; ".join(parts) + " (see /docs for the request schema)"),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return JSONResponse(
            status_code=500,
            content=_body("internal_error", "the server hit an unexpected error; it was logged, please report it"),
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = "no such endpoint; see /docs" if exc.status_code == 404 else str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            allowed = allowed_methods(app, request)
            headers["Allow"] = ", ".join(allowed)
            message = f"{request.method} is not allowed here; use {' or '.join(allowed)} (see /docs)"
        return JSONResponse(status_code=exc.status_code, content=_body(code, message), headers=headers or None)


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route of this path answers (starlette's own 405 names only the first
    route's), for the ``Allow`` header RFC 9110 requires on a 405."""
    allowed = []
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in app.router.routes):
            allowed.append(method)
    return allowed
