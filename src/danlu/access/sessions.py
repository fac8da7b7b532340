"""One session's process and the registry of open sessions (this server's).

A session is started by the instance's backend inside the rental's sandbox
(danlu.backend.Backend.enter); here it gets its descriptors (pipes, or a terminal
whose master side the server keeps) and its end: the command exits, or the client goes away (the
session's processes get SIGHUP, then SIGKILL after :data:`HANGUP_GRACE_S`; the rental runs on), or
the rental stops (its sandbox ends, and every process in it).

The registry counts open sessions per instance (a cap, so one renter cannot open a thousand). A
session's input is recorded as the instance's activity (danlu.core.activity), which idle
auto-stop reads."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import signal
import struct
import subprocess
import termios
import threading
from dataclasses import dataclass, field

import psutil
from starlette.concurrency import run_in_threadpool

from danlu.access.service import Target
from danlu.backend import Backend, EnterError, EnterRequest, enter_with_terminal
from danlu.core.errors import Conflict, QuotaExceeded

HANGUP_GRACE_S = 10.0
MAX_PER_INSTANCE = 32
LOGIN_SHELL = ["/bin/bash", "-l"]


@dataclass
class SessionProcess:
    """A started session: its process (the backend's helper, whose exit status is the command's)
    and the server's ends of its descriptors."""

    proc: subprocess.Popen[bytes]
    stdin: int  # write end (the terminal's master for a tty)
    stdout: int  # read end (the same master for a tty)
    stderr: int | None  # read end; None with a terminal
    tty: bool
    _closed: bool = field(default=False, repr=False)

    def resize(self, cols: int, rows: int) -> None:
        if self.tty:  # the kernel sends SIGWINCH to the terminal's foreground process group
            fcntl.ioctl(self.stdout, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def close_stdin(self) -> None:
        if not self.tty and self.stdin != -1:
            os.close(self.stdin)
            self.stdin = -1

    def members(self) -> list[psutil.Process]:
        """The helper and every process of the command's session (found by session id, so ones
        that left the tree by daemonising are found too), while they live."""
        try:
            helper = psutil.Process(self.proc.pid)
            children = helper.children()
        except psutil.Error:
            return []
        out = [helper]
        for child in children:  # the command (its session leader, in the sandbox's PID namespace)
            out.append(child)
            for proc in psutil.process_iter(["uids"]):
                try:
                    if proc.pid != child.pid and os.getsid(proc.pid) == child.pid:
                        out.append(proc)
                except OSError:
                    continue
        return out

    def hang_up(self) -> None:
        """The client is gone: SIGHUP to the command's process group (via the helper)."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGHUP)
            except OSError:
                pass

    def kill(self) -> None:
        """Every process of the session, at once."""
        for proc in self.members():
            try:
                proc.kill()
            except psutil.Error:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in {self.stdin, self.stdout, self.stderr}:
            if fd is not None and fd != -1:
                try:
                    os.close(fd)
                except OSError:
                    pass


def start(
    backend: Backend, t: Target, command: list[str], *, tty: bool, size: tuple[int, int], term: str = "xterm-256color"
) -> SessionProcess:
    """Start ``command`` (none: a login shell) in the instance's sandbox, with a terminal or pipes."""
    argv = command or LOGIN_SHELL
    env = dict(t.env)
    if tty:
        env["TERM"] = term
        # A pty here is the helper's own stdio (its errors reach the terminal); a sandboxed run hands
        # back the master of the pty it made in the sandbox (its own devpts), which is then the
        # session's terminal, read and resized directly.
        master, slave = pty.openpty()
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        proc, master = enter_with_terminal(backend, t.run_handle, argv, env, master, slave)
        os.set_blocking(master, False)
        return SessionProcess(proc, master, master, None, True)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = backend.enter(t.run_handle, EnterRequest(argv, env, (in_r, out_w, err_w)))
    except BaseException:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    for fd in (in_w, out_r, err_r):
        os.set_blocking(fd, False)
    return SessionProcess(proc, in_w, out_r, err_r, False)


class Registry:
    """Open sessions per instance on this server (and the reapers of dropped ones)."""

    def __init__(self, max_per_instance: int = MAX_PER_INSTANCE) -> None:
        self.max_per_instance = max_per_instance
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._lingering: set[object] = set()  # the reaping of dropped sessions' processes

    def linger(self, task: asyncio.Future[None]) -> None:
        """Keeps a dropped session's reaper alive until it is done."""
        self._lingering.add(task)
        task.add_done_callback(self._lingering.discard)

    def admit(self, instance_id: str) -> None:
        with self._lock:
            n = self._open.get(instance_id, 0)
            if n >= self.max_per_instance:
                raise QuotaExceeded(
                    "too_many_sessions",
                    f"instance {instance_id} has {n} open sessions, the most one instance may have; close one first",
                )
            self._open[instance_id] = n + 1

    def leave(self, instance_id: str) -> None:
        with self._lock:
            n = self._open.get(instance_id, 0) - 1
            if n > 0:
                self._open[instance_id] = n
            else:
                self._open.pop(instance_id, None)

    def open_count(self, instance_id: str) -> int:
        with self._lock:
            return self._open.get(instance_id, 0)


async def reap_after_grace(sp: SessionProcess) -> None:
    """A dropped session: every process of it, :data:`HANGUP_GRACE_S` after its SIGHUP."""
    await asyncio.sleep(HANGUP_GRACE_S)
    await run_in_threadpool(sp.kill)


def enter_error(exc: EnterError) -> Conflict:
    return Conflict("session_unavailable", f"cannot open a session: {exc}")
