"""The renter's own web apps through danlu: HTTP and WebSocket requests to
``/p/{instance}/{port}/…`` are relayed to 127.0.0.1:PORT *inside* the instance's network namespace
(danlu.compute.backends.netns), after the same check as a session (the renter or the team's
managers; everyone else 404). Like JupyterHub's proxy: the app is never exposed on a port of the
host, and every request is authenticated here. As jupyter-server-proxy does, ``/p/…`` takes its own
prefix off the path (apps with relative links: TensorBoard, Gradio, code-server, ``http.server``)
and ``/pa/…`` keeps the whole path, for apps told their base URL (JupyterLab:
``--ServerApp.base_url=/pa/ID/8888/``).

Each request is one upstream connection (``Connection: close``), framed by h11 in both directions,
so bodies of any size stream through (chunked or not) and nothing is buffered whole. The caller's
danlu credentials (its bearer token, the console's cookie) are taken out before the request goes on:
the app never sees them."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import h11
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

CHUNK = 256 * 1024
# Never passed on (RFC 9110 hop-by-hop), and danlu's own credentials.
DROP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
                  b"transfer-encoding", b"upgrade", b"authorization"})  # fmt: skip


def strip_cookie(value: bytes, names: tuple[str, ...]) -> bytes:
    """A Cookie header without danlu's own cookies."""
    kept = [c for c in value.split(b";") if c.strip().split(b"=", 1)[0].decode(errors="replace") not in names]
    return b";".join(kept).strip()


def _sets(value: bytes, name: bytes, cookies: tuple[str, ...]) -> bool:
    """A Set-Cookie of one of danlu's own cookies: an app may not sign a browser in or out of danlu."""
    if name.lower() != b"set-cookie":
        return False
    return value.split(b"=", 1)[0].strip().decode(errors="replace") in cookies


def request_headers(scope: Scope, drop_cookies: tuple[str, ...], prefix: bytes = b"") -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    for name, value in scope["headers"]:
        lname = name.lower()
        if lname in DROP:
            continue
        if lname == b"cookie":
            value = strip_cookie(value, drop_cookies)
            if not value:
                continue
        out.append((lname, value))
    client = scope.get("client")
    if client:
        out.append((b"x-forwarded-for", str(client[0]).encode()))
    out.append((b"x-forwarded-proto", b"https" if scope.get("scheme") in ("https", "wss") else b"http"))
    if prefix:
        out.append((b"x-forwarded-prefix", prefix))
    out.append((b"connection", b"close"))
    return out


def target_of(scope: Scope, strip: bytes = b"") -> bytes:
    """The request target for the app: the path as the client sent it, less ``strip`` (the proxy's
    own prefix, for apps that do not know they are under one), and the query."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    if strip and raw.startswith(strip):
        raw = raw[len(strip) :] or b"/"
    query = scope.get("query_string") or b""
    return raw + (b"?" + query if query else b"")


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await reader.read(CHUNK))


async def forward_http(
    scope: Scope, receive: Receive, send: Send, sock: socket.socket, drop_cookies: tuple[str, ...],
    on_traffic: Callable[[], None], strip: bytes = b"",
) -> None:  # fmt: skip
    """Relays one HTTP request and its response over ``sock`` (connected inside the sandbox),
    the path less ``strip`` (said in ``X-Forwarded-Prefix``)."""
    reader, writer = await asyncio.open_connection(sock=sock)
    conn = h11.Connection(h11.CLIENT)
    headers = request_headers(scope, drop_cookies, strip)
    if any(n.lower() == b"transfer-encoding" for n, _ in scope["headers"]):
        headers.append((b"transfer-encoding", b"chunked"))  # a body whose length was not declared
    try:
        writer.write(conn.send(h11.Request(method=scope["method"], target=target_of(scope, strip), headers=headers)))
        while True:  # the request body, as it arrives
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            if body:
                writer.write(conn.send(h11.Data(data=body)))
                await writer.drain()
            if not message.get("more_body", False):
                break
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        on_traffic()
        response = await _next_event(conn, reader)
        if not isinstance(response, h11.Response):
            raise ConnectionError("the app closed the connection without an answer")
        out = [(n.lower(), v) for n, v in response.headers if n.lower() not in DROP and not _sets(v, n, drop_cookies)]
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        while True:
            event = await _next_event(conn, reader)
            if isinstance(event, h11.Data):
                await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        writer.close()


async def relay_websocket(
    client: Any, upstream: Any, on_traffic: Callable[[], None], watch: Coroutine[Any, Any, Any]
) -> Any:
    """Messages both ways between the browser's socket (Starlette) and the app's (websockets), until
    either side closes or ``watch`` ends (a right lost: what it returns is returned)."""

    async def up() -> None:
        while True:
            message = await client.receive()
            if message["type"] == "websocket.disconnect":
                return
            on_traffic()
            text = message.get("text")
            await upstream.send(text if text is not None else message.get("bytes") or b"")

    async def down() -> None:
        async for message in upstream:
            on_traffic()  # a kernel's output while a cell runs
            if isinstance(message, str):
                await client.send_text(message)
            else:
                await client.send_bytes(message)

    return await both_ways(up(), down(), watch)


async def both_ways(
    up: Coroutine[Any, Any, None], down: Coroutine[Any, Any, None], watch: Coroutine[Any, Any, Any]
) -> Any:
    """Runs the two directions of a relay until either ends (a side closed) or ``watch`` does (the
    caller's right to the rental is gone: its result, the reason, is returned; else None), then
    stops the rest."""
    tasks = [asyncio.ensure_future(up), asyncio.ensure_future(down)]
    watching = asyncio.ensure_future(watch)
    try:
        await asyncio.wait([*tasks, watching], return_when=asyncio.FIRST_COMPLETED)
    except WebSocketDisconnect:
        pass
    finally:
        for t in (*tasks, watching):
            t.cancel()
        await asyncio.gather(*tasks, watching, return_exceptions=True)
    return watching.result() if watching.done() and not watching.cancelled() and not watching.exception() else None
