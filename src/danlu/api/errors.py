"""Typed errors → HTTP, in one place. Every error body is ``{"error": {"code", "message"}}``."""

from __future__ import annotations

import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
        wait = exc.details.get("retry_after_s")
        headers = {"Retry-After": str(wait)} if isinstance(wait, int) else None
        return JSONResponse(status_code=exc.http_status, content={"error": exc.to_dict()}, headers=headers)

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


MAX_BODY_BYTES = 1 << 20  # no request needs more: commands and environments are 64 KiB each at most


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` answers 413 ``request_too_large`` (JSON, like every
    error) before any route reads it (a 120 MB rental request was read whole into memory and stored: an
    attacker's pass in issue 11's last stop). A declared Content-Length is checked at once; a chunked body
    is counted as it arrives, held back until it ends, then handed on. (FastAPI's own ``max_body_size``
    answers in plain text, and replaces any response to a request that declared too long a body.)"""

    # A renter's own app behind the port proxy takes what it takes (a notebook's uploads): streamed
    # through, never held here (danlu.access.proxy).
    EXEMPT = ("/p/", "/pa/")
    # An upload into a rental streams into its sandbox, bounded by its disk limit (danlu.access.files):
    # the API's PUT …/files and …/files/resumable, and the console's form. Only these paths, matched exactly.
    UPLOADS = re.compile(r"^(/api/v1)?/instances/[^/]+/files(/resumable)?$")

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.EXEMPT) or self.UPLOADS.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, send)
            return
        if declared is not None or b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        total = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break
            total += len(message.get("body", b""))
            if total > self.max_bytes:
                await self._refuse(scope, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        message = f"a request body is at most {self.max_bytes >> 10} KiB; send less (long scripts go in a file)"
        await JSONResponse(status_code=413, content=_body("request_too_large", message))(scope, _gone, send)


async def _gone() -> Message:
    return {"type": "http.disconnect"}
