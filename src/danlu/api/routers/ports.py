"""The renter's web apps and tunnels (docs/access.md "Ports"):

* ``/p/{instance_id}/{port}/…`` — HTTP and WebSocket to 127.0.0.1:PORT inside the instance
  (danlu.access.proxy), for a browser signed in to the console or a client with its bearer token;
* ``GET /api/v1/instances/{id}/ports`` — the ports something listens on inside it, with their URLs;
* ``WS /api/v1/instances/{id}/ports/{port}/tunnel`` — one TCP connection as binary frames, what
  ``danlu forward`` carries for each local connection (as ``kubectl port-forward``).

Every one is checked as a session is (danlu.access.service.target): another tenant's instance is
``instance_not_found``; traffic counts as the instance's activity."""

from __future__ import annotations

import asyncio
import socket
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi import Path as FastPath
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from danlu.access import links, protocol, proxy, service, sessions
from danlu.accounts.credentials import CONSOLE_COOKIE
from danlu.api.deps import ByConnection, CurrentUser, PlatformDep
from danlu.api.routers.sessions import credentials, same_origin
from danlu.api.schemas.common import InstanceIdPath, errors
from danlu.backend import EnterError
from danlu.compute.backends.netns import PortClosed
from danlu.context import Platform
from danlu.core import activity
from danlu.core.errors import Conflict, DanluError, Forbidden, InvalidInput

router = APIRouter(prefix="/instances", tags=["ports"], responses=errors(401))
PortPath = Annotated[int, FastPath(ge=1, le=65535, description="a TCP port inside the instance")]
PREFIX = "/p"  # the app sees paths from / (our prefix taken off)
ABSOLUTE = "/pa"  # the app sees the whole path (it was told its base URL)


class PortOut(BaseModel):
    port: int
    url: str  # the app through danlu, the prefix taken off (a browser signed in to the console, or the bearer token)
    absolute_url: str  # the same, the whole path kept: for an app given it as its base URL (JupyterLab)


class PortsOut(BaseModel):
    instance_id: str
    listening: list[PortOut]  # TCP ports something listens on inside the instance now


def check_port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise InvalidInput("invalid_port", "a port is a whole number from 1 to 65535")
    return int(text)


def port_out(base: str, instance_id: str, port: int) -> PortOut:
    root = base.rstrip("/")
    return PortOut(
        port=port, url=f"{root}{PREFIX}/{instance_id}/{port}/", absolute_url=f"{root}{ABSOLUTE}/{instance_id}/{port}/"
    )


@router.get("/{instance_id}/ports", response_model=PortsOut, responses=errors(403, 404, 409))
def list_ports(instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser, request: Request) -> PortsOut:
    """The TCP ports something listens on inside the running instance, each with its URL through
    danlu (``/p/{id}/{port}/``: open it signed in to the console, or with your bearer token)."""
    t = service.running_of(p, user, instance_id)
    base = str(request.base_url)
    ports = [port_out(base, t.instance_id, n) for n in p.backend.listening(t.run_handle)]
    return PortsOut(instance_id=t.instance_id, listening=ports)


@router.get("/{instance_id}/ports/{port}", response_model=PortOut, responses=errors(403, 404, 409))
def get_port(
    instance_id: InstanceIdPath, port: PortPath, p: PlatformDep, user: CurrentUser, request: Request
) -> PortOut:
    """PORT's URLs through danlu (``danlu port ID PORT``); ``port_closed`` (409) while nothing listens on it."""
    t = service.running_of(p, user, instance_id)
    if port not in p.backend.listening(t.run_handle):
        raise Conflict("port_closed", f"nothing listens on port {port} inside {instance_id} yet (start your app on it)")
    return port_out(str(request.base_url), t.instance_id, port)


LinkIdPath = Annotated[int, FastPath(ge=1, le=2**31 - 1, description="a link's id (`danlu port ID --links`)")]


class LinkOut(BaseModel):
    id: int
    instance_id: str
    port: int
    created_at_ms: int
    created_by: str  # who made it: the link works while they may manage the instance


class LinkMade(LinkOut):
    url: str  # the app through danlu for whoever holds this URL (shown once: only its hash is kept)


def _link_out(v: links.LinkView) -> LinkOut:
    return LinkOut(id=v.id, instance_id=v.instance_id, port=v.port, created_at_ms=v.created_at_ms,
                   created_by=v.created_by)  # fmt: skip


@router.post("/{instance_id}/ports/{port}/links", response_model=LinkMade, status_code=201,
             responses=errors(403, 404, 409))  # fmt: skip
def make_link(
    instance_id: InstanceIdPath, port: PortPath, p: PlatformDep, user: CurrentUser, request: Request
) -> LinkMade:
    """A link to PORT's app for someone without a danlu account (``danlu port ID PORT --link``):
    that app only, while the instance runs, until revoked. The URL is shown once."""
    view, token = links.create(p, user, instance_id, port)
    return LinkMade(**_link_out(view).model_dump(), url=link_url(str(request.base_url), view, token))


def link_url(base: str, view: links.LinkView, token: str) -> str:
    """The URL a link opens (the API's answer and the console's page alike)."""
    return f"{port_out(base, view.instance_id, view.port).url}?{links.PARAM}={token}"


@router.get("/{instance_id}/links", response_model=list[LinkOut], responses=errors(403, 404))
def list_links(instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser) -> list[LinkOut]:
    """The instance's links still in force (their tokens are not kept, so not shown)."""
    return [_link_out(v) for v in links.list_links(p, user, instance_id)]


@router.delete("/{instance_id}/links/{link_id}", status_code=204, responses=errors(403, 404))
def revoke_link(instance_id: InstanceIdPath, link_id: LinkIdPath, p: PlatformDep, user: CurrentUser) -> Response:
    """Revokes a link: the next request with it is refused (within 2 s), its open sockets end (within 15 s)."""
    links.revoke(p, user, instance_id, link_id)
    return Response(status_code=204)


def proxy_credentials(conn: HTTPConnection, instance_id: str, port: int) -> service.Credentials:
    """A link (its cookie, or its query parameter on a page's first load) before anything else: it
    was given for this app; else the bearer token or the console's cookie, as everywhere."""
    token = conn.cookies.get(links.cookie_name(instance_id, port))
    if token is None and conn.scope["type"] == "http" and conn.scope["method"] in ("GET", "HEAD"):
        token = conn.query_params.get(links.PARAM)
    if token is None:
        return credentials(conn)
    return service.Credentials(link=token, port=port, addr=conn.client.host if conn.client is not None else None)


async def _reach(p: Platform, cred: service.Credentials, instance_id: str, port_text: str) -> tuple[Any, socket.socket]:
    port = check_port(port_text)
    t = service.decided(cred, "instance", instance_id)  # on the loop: no thread while a decision is fresh
    if t is None:
        t = await run_in_threadpool(service.cached_target, p, cred, "instance", instance_id)
    try:
        sock = await p.backend.dial(t.run_handle, port)
    except PortClosed as exc:
        raise Conflict("port_closed", str(exc)) from exc
    except EnterError as exc:
        raise sessions.enter_error(exc) from exc
    return t, sock


def _touch(p: Platform, instance_id: str) -> Any:
    """Records a person's use of the instance (idle auto-stop reads it: telemetry.activity)."""
    return lambda: p.activity.touch(instance_id, p.clock.now_ms(), activity.PORT_TRAFFIC)


async def proxy_http(scope: Scope, receive: Receive, send: Send) -> None:
    request = Request(scope, receive)
    p: Platform = request.app.state.platform
    params = request.path_params
    iid = params["instance_id"]
    try:
        if request.method not in ("GET", "HEAD", "OPTIONS") and not same_origin(request):
            raise Forbidden("bad_origin", "a request from a page of another site does not reach the app")
        cred = proxy_credentials(request, iid, check_port(params["port"]))
        if links.PARAM in request.query_params and cred.link == request.query_params[links.PARAM]:
            await run_in_threadpool(service.cached_target, p, cred, "instance", iid)  # a bad link: refused here
            await _keep_link(request, cred)(scope, receive, send)
            return
        t, sock = await _reach(p, cred, iid, params["port"])
    except DanluError as exc:
        wait = exc.details.get("retry_after_s")
        headers = {"Retry-After": str(wait)} if wait is not None else None
        await JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status, headers=headers)(scope, receive, send)
        return
    # A page's polling (GET) is not a person: a notebook tab left open must not keep a rental alive.
    touch = _touch(p, t.instance_id) if request.method not in ("GET", "HEAD", "OPTIONS") else (lambda: None)
    try:
        drop = (CONSOLE_COOKIE, links.cookie_name(iid, int(params["port"])))  # never shown to the app
        await proxy.forward_http(scope, receive, send, sock, drop, touch, _strip(scope, params))
    except (OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
        error = Conflict("port_closed", f"the app on port {params['port']} closed the connection: {exc}")
        try:
            await JSONResponse({"error": error.to_dict()}, status_code=502)(scope, receive, send)
        except RuntimeError:  # the response had begun: the client sees it cut short
            pass


def _keep_link(request: Request, cred: service.Credentials) -> RedirectResponse:
    """A link's first load: the same page without the token in its URL (no app, history or Referer
    sees it), the token kept as a cookie for this app's path only."""
    params = request.path_params
    root = ABSOLUTE if request.url.path.startswith(ABSOLUTE + "/") else PREFIX
    query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != links.PARAM])
    response = RedirectResponse(request.url.path + (f"?{query}" if query else ""), status_code=303)
    assert cred.link is not None and cred.port is not None
    response.set_cookie(links.cookie_name(params["instance_id"], cred.port), cred.link,
                        path=f"{root}/{params['instance_id']}/{cred.port}/", httponly=True, samesite="lax",
                        secure=request.url.scheme == "https")  # fmt: skip
    return response


def _strip(scope: Scope, params: dict[str, Any]) -> bytes:
    """Our prefix, taken off the path under /p/ (kept under /pa/)."""
    prefix = f"{PREFIX}/{params['instance_id']}/{params['port']}"
    return prefix.encode() if scope["path"].startswith(prefix + "/") else b""


async def proxy_bare(scope: Scope, receive: Receive, send: Send) -> None:
    """``/p/ID/PORT`` → ``/p/ID/PORT/``: an app's relative links need the slash."""
    path = scope["path"] + "/" + ("?" + scope["query_string"].decode() if scope.get("query_string") else "")
    await RedirectResponse(path, status_code=307)(scope, receive, send)


async def proxy_websocket(ws: WebSocket) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake

    p: Platform = ws.app.state.platform
    try:
        if not same_origin(ws):
            raise Forbidden("bad_origin", "a page of another site cannot open the app's sockets")
        iid = ws.path_params["instance_id"]
        cred = proxy_credentials(ws, iid, check_port(ws.path_params["port"]))
        t, sock = await _reach(p, cred, iid, ws.path_params["port"])
    except DanluError as exc:  # an HTTP answer to the upgrade, as the same request would get without it
        await _deny(ws, exc)
        return
    scope = ws.scope
    host = ws.headers.get("host", "localhost")
    strip = _strip(scope, ws.path_params)
    keep = (b"cookie", b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-prefix", b"user-agent")
    forwarded = proxy.request_headers(scope, (CONSOLE_COOKIE, links.cookie_name(iid, cred.port or 0)), strip)
    headers = [(n.decode(), v.decode(errors="replace")) for n, v in forwarded if n in keep]
    wanted = [s.strip() for s in ws.headers.get("sec-websocket-protocol", "").split(",") if s.strip()]
    uri = f"ws://{host}{proxy.target_of(scope, strip).decode(errors='replace')}"
    try:
        upstream = await connect(uri, sock=sock, additional_headers=headers, origin=ws.headers.get("origin"),  # type: ignore[arg-type]
                                 subprotocols=wanted or None, max_size=None, compression=None, open_timeout=30)  # type: ignore[arg-type]  # fmt: skip
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        sock.close()
        await ws.close(code=4502, reason=f"the app refused the socket: {exc}"[:120])
        return
    async with upstream:
        await ws.accept(subprotocol=upstream.subprotocol)
        lost = await proxy.relay_websocket(ws, upstream, _touch(p, t.instance_id), service.lost(p, cred, t))
    await _close(ws, lost)


async def _close(ws: WebSocket, lost: DanluError | None) -> None:
    """Closes the client's socket: normally, or with the right it lost (4000 + the REST status)."""
    try:
        if lost is None:
            await ws.close()
        else:
            await ws.close(code=protocol.close_code(lost), reason=f"{lost.code}: {lost.message}"[:120])
    except (RuntimeError, WebSocketDisconnect):  # already closed by the client
        pass


async def _deny(ws: WebSocket, exc: DanluError) -> None:
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status))
    else:
        await ws.accept()
        await ws.close(code=protocol.close_code(exc), reason=exc.code or "")


@router.websocket("/{instance_id}/ports/{port}/tunnel", dependencies=[ByConnection])
async def tunnel(ws: WebSocket, instance_id: str, port: str) -> None:
    """One TCP connection to PORT inside the instance, its bytes as binary frames both ways."""
    p: Platform = ws.app.state.platform
    await ws.accept()
    cred = credentials(ws)
    try:
        if not same_origin(ws):
            raise Forbidden("bad_origin", "a tunnel opens only from a client without an Origin or danlu's pages")
        t, sock = await _reach(p, cred, instance_id, port)
    except DanluError as exc:  # said by the close alone: any byte of a frame is the app's data
        await ws.close(code=protocol.close_code(exc), reason=f"{exc.code}: {exc.message}"[:120])
        return
    reader, writer = await asyncio.open_connection(sock=sock)
    touch = _touch(p, t.instance_id)

    async def up() -> None:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data:
                touch()
                writer.write(data)
                await writer.drain()

    async def down() -> None:
        while data := await reader.read(proxy.CHUNK):
            await ws.send_bytes(data)

    lost = None
    try:
        lost = await proxy.both_ways(up(), down(), service.lost(p, cred, t))
    finally:
        writer.close()
        await _close(ws, lost)


class _Asgi:
    """A plain ASGI endpoint for Starlette's Route (a bare function would be wrapped as request → response)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
ROUTES = [
    route
    for root in (PREFIX, ABSOLUTE)
    for route in (
        Route(root + "/{instance_id}/{port}", _Asgi(proxy_bare), include_in_schema=False),
        Route(root + "/{instance_id}/{port}/{path:path}", _Asgi(proxy_http), include_in_schema=False, methods=METHODS),
        WebSocketRoute(root + "/{instance_id}/{port}/{path:path}", proxy_websocket),
    )
]
