"""Reaching a port of a running sandbox: a TCP connection made *inside* the sandbox's own network
namespace, to its loopback. The port proxy and port forwarding use it (docs/access.md "Ports").

No host port is ever opened, so no other local user can reach a renter's app, and the sandbox needs
no network of any kind (policy ``none`` works). A socket is made by a thread that joins the
namespace with ``setns`` (network namespaces are per thread) and stays there, one per run in use
(:class:`_Dialer`); the socket stays in the sandbox's namespace whatever thread connects and uses it
after. Pool threads and the event loop never join one.
A sandbox on the host's own network (policy ``host``) is refused: its loopback is the host's."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import ctypes
import os
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

from danlu.backend import EnterError
from danlu.compute.backends.procs import live_process

CLONE_NEWNET = 0x40000000
CONNECT_TIMEOUT_S = 10.0
IDLE_S = 60.0  # a run's dialer thread ends after this long without a connection asked for
POOL = 16  # unconnected sockets a run's dialer keeps ready (file descriptors, nothing more)
_libc = ctypes.CDLL(None, use_errno=True)


class PortClosed(EnterError):
    """Nothing listens on that port in the sandbox."""


def _ns_fd(h: dict[str, Any]) -> int:
    init = live_process(h.get("init", 0), h.get("ict"))
    if init is None:
        raise EnterError("the run has ended")
    fd = os.open(f"/proc/{init.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    if live_process(init.pid, h.get("ict")) is None:  # the pid was reused while we opened it
        os.close(fd)
        raise EnterError("the run has ended")
    if os.fstat(fd).st_ino == os.stat("/proc/self/ns/net").st_ino:
        os.close(fd)
        raise EnterError("its network is the host's (policy host): ports are reached only in a namespace of its own")
    return fd


class _Dialer:
    """One thread inside one sandbox's network namespace, making sockets there; it ends after
    :data:`IDLE_S` without an ask. A socket belongs to the namespace it was made in, whatever thread
    connects and uses it after, so only this thread ever joins the namespace. It keeps
    :data:`POOL` unconnected sockets ready, so the event loop takes one without waiting on any thread
    (a hand-off to a thread waits for the GIL, up to 5 ms on a busy server: a new thread, then a
    pool thread, per connection was most of a proxied request's time); an empty pool is waited for."""

    def __init__(self, key: tuple[int, float], fd: int) -> None:
        self.key = key
        self.alive = True
        self.ready: collections.deque[socket.socket] = collections.deque()
        self._asks: queue.SimpleQueue[Callable[[socket.socket | OSError], None] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, args=(fd,), name="danlu-netns-dialer", daemon=True).start()

    def ask(self, reply: Callable[[socket.socket | OSError], None] | None) -> None:
        """A socket for ``reply`` (None: top the pool up)."""
        self._asks.put(reply)

    def take(self) -> socket.socket | None:
        try:
            sock = self.ready.popleft()
        except IndexError:
            return None
        self.ask(None)
        return sock

    def _run(self, fd: int) -> None:
        try:
            failed = OSError(ctypes.get_errno(), "setns") if _libc.setns(fd, CLONE_NEWNET) != 0 else None
        finally:
            os.close(fd)
        while True:
            try:
                reply = self._asks.get(timeout=0 if failed else IDLE_S)
            except queue.Empty:
                with _dialers_lock:
                    if self._asks.empty():  # asks are made under this lock: none is lost
                        self.alive = False
                        _dialers.pop(self.key, None)
                        break
                continue
            if failed is not None:
                if reply is not None:
                    reply(failed)
                continue
            try:
                if reply is not None:
                    reply(_new_socket())
                while len(self.ready) < POOL:
                    self.ready.append(_new_socket())
            except OSError as exc:
                if reply is not None:
                    reply(exc)
        while self.ready:  # nobody can take them now
            with contextlib.suppress(IndexError):
                self.ready.popleft().close()


def _new_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


_dialers: dict[tuple[int, float], _Dialer] = {}
_dialers_lock = threading.Lock()


def _dialer(h: dict[str, Any]) -> _Dialer:
    """The run's dialer (started here if none is alive)."""
    if not h.get("sb"):
        raise EnterError("the run has no sandbox (--no-sandbox): its ports are this host's; reach them directly")
    key = (int(h.get("init", 0)), float(h.get("ict") or 0.0))
    with _dialers_lock:
        dialer = _dialers.get(key)
        if dialer is None or not dialer.alive:
            dialer = _dialers[key] = _Dialer(key, _ns_fd(h))  # checks the run is alive, not on host network
        return dialer


def _socket(h: dict[str, Any], reply: Callable[[socket.socket | OSError], None]) -> socket.socket | None:
    """A socket in the run's namespace: one from the pool at once where one is ready (the usual
    case, no thread involved), else None and the dialer gives ``reply`` one when it has made it."""
    dialer = _dialer(h)
    sock = dialer.take()
    if sock is not None:
        return sock
    with _dialers_lock:
        if dialer.alive:
            dialer.ask(reply)
            return None
    return _socket(h, reply)  # it ended just now: a new one


def _made(result: socket.socket | OSError, port: int) -> socket.socket:
    if isinstance(result, OSError):
        raise EnterError(f"could not reach port {port} inside the instance: {result}")
    return result


def _not_reached(sock: socket.socket, port: int, exc: BaseException) -> EnterError:
    """The error a failed connect to ``port`` is (the socket closed)."""
    sock.close()
    if isinstance(exc, ConnectionRefusedError):
        return PortClosed(f"nothing listens on port {port} inside the instance (start your app on 127.0.0.1:{port})")
    return EnterError(f"could not reach port {port} inside the instance: {exc or 'timed out'}")


def connect(h: dict[str, Any], port: int) -> socket.socket:
    """A socket connected to 127.0.0.1:``port`` in the sandbox of the local run ``h`` (blocking:
    for a thread; the event loop has :func:`dial`)."""
    made: concurrent.futures.Future[socket.socket | OSError] = concurrent.futures.Future()
    sock = _socket(h, made.set_result)
    if sock is None:
        try:
            sock = _made(made.result(timeout=CONNECT_TIMEOUT_S), port)
        except TimeoutError:
            raise EnterError(f"could not reach port {port} inside the instance: no socket in time") from None
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(("127.0.0.1", port))
    except OSError as exc:
        raise _not_reached(sock, port, exc) from None
    sock.settimeout(None)
    return sock


async def dial(h: dict[str, Any], port: int) -> socket.socket:
    """:func:`connect` on the event loop: the socket from the run's dialer, connected by the loop
    (non-blocking, no pool thread)."""
    loop = asyncio.get_running_loop()
    made: asyncio.Future[socket.socket | OSError] = loop.create_future()

    def settle(result: socket.socket | OSError) -> None:
        if made.done():  # the caller gave up (cancelled): the socket is nobody's
            if isinstance(result, socket.socket):
                result.close()
        else:
            made.set_result(result)

    def reply(result: socket.socket | OSError) -> None:  # from the dialer's thread
        try:
            loop.call_soon_threadsafe(settle, result)
        except RuntimeError:  # the loop has closed
            if isinstance(result, socket.socket):
                result.close()

    sock = _socket(h, reply) or _made(await made, port)
    try:
        await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise _not_reached(sock, port, exc) from None
    except BaseException:
        sock.close()
        raise
    return sock


def listening(h: dict[str, Any]) -> list[int]:
    """The TCP ports something listens on in the sandbox's namespace (its /proc/net/tcp, tcp6)."""
    init = live_process(h.get("init", 0), h.get("ict"))
    if init is None or not h.get("sb"):
        return []
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{init.pid}/net/{table}") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A":  # LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return sorted(ports)
