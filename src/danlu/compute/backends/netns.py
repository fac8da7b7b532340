"""Reaching a port of a running sandbox: a TCP connection made *inside* the sandbox's own network
namespace, to its loopback. The port proxy and port forwarding use it (docs/access.md "Ports").

No host port is ever opened, so no other local user can reach a renter's app, and the sandbox needs
no network of any kind (policy ``none`` works). A connection is made by a thread of its own that
joins the namespace with ``setns`` (network namespaces are per thread), connects, and ends: the
socket stays in the sandbox's namespace whatever thread uses it after. Pool threads never join one.
A sandbox on the host's own network (policy ``host``) is refused: its loopback is the host's."""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from typing import Any

from danlu.compute.backends.base import EnterError
from danlu.compute.backends.procs import live_process

CLONE_NEWNET = 0x40000000
CONNECT_TIMEOUT_S = 10.0
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


def connect(h: dict[str, Any], port: int) -> socket.socket:
    """A socket connected to 127.0.0.1:``port`` in the sandbox of the local run ``h``."""
    if not h.get("sb"):
        raise EnterError("the run has no sandbox (--no-sandbox): its ports are this host's; reach them directly")
    fd = _ns_fd(h)
    out: dict[str, Any] = {}

    def dial() -> None:
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
            out["sock"] = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            out["error"] = exc

    thread = threading.Thread(target=dial, name="danlu-netns-dial", daemon=True)
    try:
        thread.start()
        thread.join()
    finally:
        os.close(fd)
    if "sock" in out:
        sock: socket.socket = out["sock"]
        sock.settimeout(None)
        return sock
    exc = out.get("error")
    if isinstance(exc, ConnectionRefusedError):
        raise PortClosed(f"nothing listens on port {port} inside the instance (start your app on 127.0.0.1:{port})")
    raise EnterError(f"could not reach port {port} inside the instance: {exc}")


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
