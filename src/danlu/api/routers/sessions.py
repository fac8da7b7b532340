"""Sessions into a running instance over one WebSocket: ``/api/v1/instances/{id}/exec`` (an exec,
or with ``tty=true`` a terminal; the protocol is danlu.access.protocol, docs/access.md).

Authenticated like every route (``Authorization: Bearer``), refused to a page of another origin
(a browser sends its Origin on every upgrade), and another tenant's instance is ``instance_not_found``.
Refusals are sent as the status frame of an accepted socket, then the socket is closed with
``4000 + the HTTP status`` the REST API gives the same refusal (a client sees the stable code)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from danlu.access import filescripts, protocol, relay, service, sessions, transfer
from danlu.accounts.credentials import CONSOLE_COOKIE
from danlu.api.deps import ByConnection
from danlu.backend import EnterError
from danlu.context import Platform
from danlu.core import activity
from danlu.core.errors import DanluError, Forbidden, InvalidInput

router = APIRouter(prefix="/instances", tags=["sessions"])
jobs_router = APIRouter(prefix="/jobs", tags=["sessions"])


class _Socket:
    """The relay's peer: binary frames of a Starlette WebSocket."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws

    async def send_bytes(self, data: bytes) -> None:
        await self.ws.send_bytes(data)

    async def receive_frame(self) -> bytes | None:
        try:
            message = await self.ws.receive()
        except (WebSocketDisconnect, RuntimeError):
            return None
        if message["type"] == "websocket.disconnect":
            return None
        data = message.get("bytes")
        if data is None:  # a text frame: the protocol is binary
            raise InvalidInput("invalid_frame", "send binary frames: a channel byte, then the payload")
        return bytes(data)


def credentials(conn: HTTPConnection) -> service.Credentials:
    """The bearer token, else the console's session cookie (a browser cannot set headers on an upgrade)."""
    scheme, _, value = conn.headers.get("authorization", "").partition(" ")
    bearer = (value.strip() or None) if scheme.lower() == "bearer" else None
    addr = conn.client.host if conn.client is not None else None
    return service.Credentials(bearer, None if bearer else conn.cookies.get(CONSOLE_COOKIE), addr=addr)


def same_origin(conn: HTTPConnection) -> bool:
    """A browser's upgrade from a page of another site carries that site's Origin: refused, so a
    page elsewhere cannot ride a signed-in renter's credentials (cross-site WebSocket hijacking)."""
    origin = conn.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == conn.headers.get("host", "").lower()


def _options(ws: WebSocket) -> tuple[list[str], bool, tuple[int, int]]:
    q = ws.query_params
    command = protocol.check_command(q.getlist("command"))
    tty_text = q.get("tty", "false").lower()
    if tty_text not in ("true", "false", "1", "0"):
        raise InvalidInput("invalid_tty", "tty is true or false")
    tty = tty_text in ("true", "1")
    size = protocol.parse_size(q.get("cols", 80), q.get("rows", 24))
    return command, tty, size


async def _refuse(ws: WebSocket, error: DanluError) -> None:
    try:
        await ws.send_bytes(protocol.status_frame(error=error))
        await ws.close(code=protocol.close_code(error), reason=error.code or "")
    except (WebSocketDisconnect, RuntimeError):
        pass


@router.websocket("/{instance_id}/exec", dependencies=[ByConnection])
async def exec_session(ws: WebSocket, instance_id: str) -> None:
    await _session(ws, service.target, instance_id)


@jobs_router.websocket("/{job_id}/exec", dependencies=[ByConnection])
async def job_exec_session(ws: WebSocket, job_id: str) -> None:
    """The same session into a running job's current run (``danlu job exec|shell``)."""
    await _session(ws, service.job_target, job_id)


async def _session(ws: WebSocket, resolve: Any, object_id: str) -> None:
    p: Platform = ws.app.state.platform
    registry: sessions.Registry = ws.app.state.sessions
    wanted = ws.headers.get("sec-websocket-protocol", "")
    await ws.accept(subprotocol=protocol.SUBPROTOCOL if protocol.SUBPROTOCOL in wanted else None)
    token = credentials(ws)
    try:
        if not same_origin(ws):
            raise Forbidden("bad_origin", "a session opens only from danlu's own pages or a client without an Origin")
        command, tty, size = _options(ws)
        if resolve is service.target and filescripts.is_file_command(command):  # `danlu cp`, stopped rentals too
            target = await run_in_threadpool(transfer.files_target_of, p, token, object_id, ws.app.state.transfers)
        else:
            _, target = await run_in_threadpool(resolve, p, token, object_id)
        registry.admit(target.instance_id)
    except DanluError as exc:
        await _refuse(ws, exc)
        return
    try:
        await _run(ws, p, token, target, command, tty, size)
    finally:
        registry.leave(target.instance_id)


async def _run(
    ws: WebSocket,
    p: Platform,
    token: service.Credentials,
    target: service.Target,
    command: list[str],
    tty: bool,
    size: tuple[int, int],
) -> None:
    try:
        sp = await run_in_threadpool(sessions.start, p.backend, target, command, tty=tty, size=size)
    except EnterError as exc:
        await _refuse(ws, sessions.enter_error(exc))
        return

    async def recheck() -> DanluError | None:
        return await run_in_threadpool(service.still_allowed, p, token, target)

    outcome: Any = None
    try:
        outcome = await relay.relay(
            sp,
            _Socket(ws),
            on_input=lambda: p.activity.touch(target.instance_id, p.clock.now_ms(), activity.KEYSTROKES),
            recheck=recheck,
            recheck_s=service.RECHECK_S,
        )
    except (WebSocketDisconnect, RuntimeError, OSError):
        outcome = None  # the client went away mid-send
    finally:
        if isinstance(outcome, int):
            sp.close()
            await _close(ws, protocol.CLOSE_NORMAL)
        elif isinstance(outcome, DanluError):  # a lost right or a bad frame: the session ends now
            await run_in_threadpool(sp.kill)
            sp.close()
            await _refuse(ws, outcome)
        else:  # the client went away: SIGHUP now, every process of the session after the grace
            sp.hang_up()
            sp.close()
            ws.app.state.sessions.linger(asyncio.ensure_future(sessions.reap_after_grace(sp)))


async def _close(ws: WebSocket, code: int) -> None:
    try:
        await ws.close(code=code)
    except (WebSocketDisconnect, RuntimeError):
        pass
