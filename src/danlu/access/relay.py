"""Relays one session between its WebSocket and its process, on the event loop, without a thread
per session: descriptors are watched with the loop's readers and writers, the process's end with a
pidfd. Output is read only as fast as the client takes it (a flood waits in the pipe, not in
memory); input is written only as fast as the process reads it."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from danlu.access import protocol
from danlu.access.sessions import SessionProcess
from danlu.core.errors import DanluError, InvalidInput

CHUNK = 64 * 1024


class Peer(Protocol):
    async def send_bytes(self, data: bytes) -> None: ...
    async def receive_frame(self) -> bytes | None: ...  # None: the client has gone


class Ended(Exception):
    """The relay is over for the reason given (``gone``: the client left)."""


async def _writable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view[:CHUNK])
        except BlockingIOError:
            await _writable(fd)
            continue
        except OSError as exc:  # the process closed its input, or the terminal is gone
            if exc.errno in (errno.EPIPE, errno.EIO, errno.EBADF):
                return
            raise
        view = view[n:]


async def _pump_out(fd: int, channel: int, peer: Peer, exited: asyncio.Future[None]) -> None:
    """Sends what ``fd`` gives until its end, or, once the process has exited, until nothing more
    is waiting (a process left behind holding the descriptor does not hold the session open).

    The wait for output is one Event, woken by a one-shot reader or by the exit: this is every
    keystroke's echo, and ``asyncio.wait`` on a fresh set of futures each time cost most of its
    time on the server with 100 shells typing (benchmarks/shell_echo.py)."""
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()

    def on_readable() -> None:
        loop.remove_reader(fd)  # one-shot: level-triggered, it would fire on every loop pass until read
        ready.set()

    def on_exit(_: asyncio.Future[None]) -> None:
        ready.set()

    exited.add_done_callback(on_exit)
    try:
        while True:
            try:
                data = os.read(fd, CHUNK)
            except BlockingIOError:
                if exited.done():
                    return
                ready.clear()
                loop.add_reader(fd, on_readable)
                await ready.wait()
                continue
            except OSError as exc:  # EIO: every holder of the terminal's other side is gone
                if exc.errno == errno.EIO:
                    return
                raise
            if not data:
                return
            await peer.send_bytes(protocol.frame(channel, data))
    finally:
        exited.remove_done_callback(on_exit)
        loop.remove_reader(fd)


async def _pump_in(sp: SessionProcess, peer: Peer, on_input: Callable[[], None]) -> None:
    while True:
        data = await peer.receive_frame()
        if data is None:
            raise Ended("gone")
        f = protocol.parse_frame(data)
        if f.channel == protocol.STDIN:
            if f.payload:
                on_input()
                if sp.stdin != -1:
                    await _write_all(sp.stdin, f.payload)
        elif f.channel == protocol.RESIZE:
            if not sp.tty:
                raise InvalidInput("invalid_frame", "a resize needs a terminal (tty=true)")
            sp.resize(*protocol.parse_resize(f.payload))
        else:
            sp.close_stdin()


async def _watch_rights(recheck: Callable[[], Awaitable[DanluError | None]], every_s: float) -> DanluError:
    while True:
        await asyncio.sleep(every_s)
        lost = await recheck()
        if lost is not None:
            return lost


async def relay(
    sp: SessionProcess,
    peer: Peer,
    *,
    on_input: Callable[[], None],
    recheck: Callable[[], Awaitable[DanluError | None]],
    recheck_s: float,
) -> int | DanluError | None:
    """Runs the session to its end. Returns the command's exit code (it ended: the status frame is
    sent), the error that ended it (a bad frame, a lost right: not yet sent), or None (the client
    went away)."""
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()
    pidfd = os.pidfd_open(sp.proc.pid)

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    outs = [asyncio.ensure_future(_pump_out(sp.stdout, protocol.STDOUT, peer, exited))]
    if sp.stderr is not None:
        outs.append(asyncio.ensure_future(_pump_out(sp.stderr, protocol.STDERR, peer, exited)))
    pump_in = asyncio.ensure_future(_pump_in(sp, peer, on_input))
    rights = asyncio.ensure_future(_watch_rights(recheck, recheck_s))
    try:
        waiting: set[asyncio.Future[Any]] = {exited, pump_in, rights}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if exited.done():
            pump_in.cancel()
            rights.cancel()
            await asyncio.gather(*outs)
            code = sp.proc.wait()
            code = 128 - code if code < 0 else code
            await peer.send_bytes(protocol.status_frame(exit_code=code))
            return code
        if rights.done():
            return rights.result()
        exc = pump_in.exception()
        if isinstance(exc, Ended):
            return None
        if isinstance(exc, DanluError):
            return exc
        if exc is not None:
            raise exc
        return None
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        for task in (*outs, pump_in, rights):
            task.cancel()
        await asyncio.gather(*outs, pump_in, rights, return_exceptions=True)
