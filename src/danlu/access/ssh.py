"""The SSH gateway (docs/access.md "SSH"): ``ssh -p PORT ID@HOST`` lands in that instance's sandbox.

asyncssh speaks the protocol; nothing of a session runs in the server process. The user name is an
instance id (``i-…``) or a running job's id (``j-…``); the client proves it holds a key one person
registered (``danlu key add``); that person must be allowed to open a session there, exactly as for
``danlu shell`` (access.service), and keeps being checked every 15 s (a removed key, a member removed
from the team, a stop end the connection's sessions).

* a shell or a command (with or without a terminal) is a session process in the sandbox
  (access.sessions.start): ``scp`` (legacy mode), ``rsync -e ssh`` and VS Code's server run so;
* the ``sftp`` subsystem (scp's default mode too) is OpenSSH's ``sftp-server`` run *inside* the
  sandbox, as the renter: an SFTP server in this process would read and write with the platform's
  rights;
* ``ssh -L`` (direct-tcpip) reaches only the rental's own loopback, through its network namespace
  (backend ``connect``), as the port proxy does;
* refused: passwords and keyboard-interactive, ``ssh -R`` (remote forwarding), agent and X11
  forwarding.

The host key is made once (ed25519) and kept in the data folder, so clients see the same key after
a restart.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
from pathlib import Path
from typing import Any

import asyncssh
from asyncssh.constants import EXTENDED_DATA_STDERR as STDERR_DATA
from asyncssh.stream import SSHReader, SSHWriter
from starlette.concurrency import run_in_threadpool

from danlu.access import protocol, relay, service, sessions
from danlu.backend import EnterError
from danlu.context import Platform
from danlu.core import activity
from danlu.core.errors import DanluError

log = logging.getLogger(__name__)
SFTP_SERVER = ("/usr/lib/openssh/sftp-server", "/usr/libexec/sftp-server", "/usr/lib/sftp-server")
LOOPBACK = ("localhost", "127.0.0.1", "::1", "ip6-localhost")


def host_key(data_dir: Path) -> asyncssh.SSHKey:
    """The gateway's ed25519 host key, made on first use and kept (mode 0600) in the data folder."""
    path = data_dir / "ssh_host_ed25519_key"
    if not path.exists():
        key = asyncssh.generate_private_key("ssh-ed25519", comment="danlu gateway")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.export_private_key())
    return asyncssh.read_private_key(str(path))


class Gateway(asyncssh.SSHServer):
    """One client connection: who it is, and which instance it reaches."""

    def __init__(self, p: Platform, registry: sessions.Registry) -> None:
        self.p, self.registry = p, registry
        self.cred: service.Credentials | None = None
        self.target: service.Target | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn

    def begin_auth(self, username: str) -> bool:
        return True  # always a key

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        cred = service.Credentials(ssh_key=key.get_fingerprint("sha256"))
        try:
            _, target = await run_in_threadpool(service.any_target, self.p, cred, username)
        except DanluError as exc:  # an unknown key, another person's instance, a stopped one: all "no"
            log.info("ssh: refused %s for %s: %s", key.get_fingerprint("sha256"), username[:40], exc.code)
            return False
        self.cred, self.target = cred, target
        return True

    def session_requested(self) -> asyncssh.SSHServerSession[bytes]:
        return _Process(handle, None, 3, False)

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False  # ssh -R: nothing of a rental listens on this host

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> Any:
        """ssh -L: the rental's own loopback only, reached inside its network namespace."""
        if dest_host.lower() not in LOOPBACK or self.target is None:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "only the instance's own 127.0.0.1 can be forwarded"
            )
        target, p, cred = self.target, self.p, self.cred
        assert cred is not None  # set with the target

        async def tunnel(reader: asyncssh.SSHReader[bytes], writer: asyncssh.SSHWriter[bytes]) -> None:
            try:
                sock = await run_in_threadpool(p.backend.connect, target.run_handle, dest_port)
            except EnterError as exc:
                writer.write_eof()
                writer.close()
                log.info("ssh -L to %s refused: %s", dest_port, exc)
                return
            r, w = await asyncio.open_connection(sock=sock)

            async def up() -> None:
                while data := await reader.read(relay.CHUNK):
                    p.activity.touch(target.instance_id, p.clock.now_ms(), activity.PORT_TRAFFIC)
                    w.write(data)
                    await w.drain()
                w.write_eof()

            async def down() -> None:
                while data := await r.read(relay.CHUNK):
                    writer.write(data)
                    await writer.drain()
                writer.write_eof()

            both: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(up(), down()))  # EOFs passed on
            watch: asyncio.Future[Any] = asyncio.ensure_future(service.lost(p, cred, target))  # as a shell's
            try:
                await asyncio.wait({both, watch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (both, watch):
                    task.cancel()
                await asyncio.gather(both, watch, return_exceptions=True)  # (OSError, asyncssh.Error: a side went)
                w.close()
                writer.close()

        return tunnel


class _Process(asyncssh.SSHServerProcess[bytes]):
    """asyncssh's server process, but the ``sftp`` subsystem goes to :func:`handle` like any
    command (sftp-server inside the sandbox) instead of asyncssh's in-process SFTP server."""

    def subsystem_requested(self, subsystem: str) -> bool:
        return subsystem == "sftp"

    def session_started(self) -> None:
        chan, conn, factory = self._chan, self._conn, self._session_factory
        assert chan is not None and conn is not None and factory is not None
        stdin = SSHReader[bytes](self, chan)
        handler = factory(stdin, SSHWriter[bytes](self, chan), SSHWriter[bytes](self, chan, STDERR_DATA))
        if inspect.isawaitable(handler):
            conn.create_task(handler, stdin.logger)


def _argv(process: asyncssh.SSHServerProcess[bytes]) -> list[str]:
    if process.subsystem == "sftp":
        return [next((x for x in SFTP_SERVER if Path(x).exists()), SFTP_SERVER[0])]
    if process.subsystem:
        raise EnterError(f"the {process.subsystem!r} subsystem is not offered (only sftp)")
    if process.command:
        return ["/bin/sh", "-c", process.command]
    return list(sessions.LOGIN_SHELL)


async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
    """One channel: a shell, a command or sftp, as a session process in the rental's sandbox."""
    gateway = process.get_extra_info("connection").get_owner()
    assert isinstance(gateway, Gateway) and gateway.target is not None and gateway.cred is not None
    p, target, cred = gateway.p, gateway.target, gateway.cred
    registry = gateway.registry
    try:
        registry.admit(target.instance_id)
    except DanluError as exc:
        process.stderr.write(f"danlu: {exc.message}\r\n".encode())
        process.exit(1)
        return
    try:
        await _run(process, p, registry, target, cred)
    finally:
        registry.leave(target.instance_id)


async def _run(
    process: asyncssh.SSHServerProcess[bytes],
    p: Platform,
    registry: sessions.Registry,
    target: service.Target,
    cred: service.Credentials,
) -> None:
    tty = process.term_type is not None and process.subsystem is None
    cols, rows, *_ = process.term_size if tty else (80, 24, 0, 0)
    try:
        argv = _argv(process)
        sp = await run_in_threadpool(
            sessions.start, p.backend, target, argv, tty=tty, size=(cols or 80, rows or 24),
            term=process.term_type or "xterm-256color",
        )  # fmt: skip
    except EnterError as exc:
        process.stderr.write(f"danlu: cannot open a session: {exc}\r\n".encode())
        process.exit(1)
        return

    async def recheck() -> DanluError | None:
        return await run_in_threadpool(service.still_allowed, p, cred, target)

    outcome = await relay.relay(
        sp,
        _Channel(process, sp),
        on_input=lambda: p.activity.touch(target.instance_id, p.clock.now_ms(), activity.KEYSTROKES),
        recheck=recheck,
        recheck_s=service.RECHECK_S,
    )
    sp.close()
    if isinstance(outcome, int):
        process.exit(outcome)
        return
    if isinstance(outcome, DanluError):
        await run_in_threadpool(sp.kill)
        process.stderr.write(f"\r\ndanlu: {outcome.message}\r\n".encode())
        process.exit(255)
        return
    sp.hang_up()  # the client went away
    registry.linger(asyncio.ensure_future(sessions.reap_after_grace(sp)))


class _Channel:
    """The relay's peer over an SSH channel: the relay's frames become the channel's streams
    (stdout, stderr), and the channel's input, window changes and EOF become frames."""

    def __init__(self, process: asyncssh.SSHServerProcess[bytes], sp: sessions.SessionProcess) -> None:
        self.process, self.sp = process, sp

    async def send_bytes(self, data: bytes) -> None:
        if data[0] == protocol.STDOUT:
            self.process.stdout.write(data[1:])
            await self.process.stdout.drain()
        elif data[0] == protocol.STDERR:
            self.process.stderr.write(data[1:])
            await self.process.stderr.drain()

    async def receive_frame(self) -> bytes | None:
        while True:
            try:
                data = await self.process.stdin.read(relay.CHUNK)
            except asyncssh.TerminalSizeChanged as exc:
                return protocol.frame(protocol.RESIZE, json.dumps({"cols": exc.width, "rows": exc.height}).encode())
            except (asyncssh.BreakReceived, asyncssh.SignalReceived):
                continue
            except (asyncssh.Error, OSError):
                return None
            if data:
                return protocol.frame(protocol.STDIN, data)
            if self.process.channel.is_closing():
                return None
            if self.sp.tty:  # EOF on a terminal's input: nothing more to type; wait for the end
                await self.process.channel.wait_closed()
                return None
            self.sp.close_stdin()
            await self.process.channel.wait_closed()
            return None


class SshGateway:
    """The listening server, started and stopped with the app (danlu.api.app)."""

    def __init__(self, p: Platform, registry: sessions.Registry, host: str, port: int) -> None:
        self.p, self.registry, self.host, self.port = p, registry, host, port
        self.server: asyncssh.SSHAcceptor | None = None

    async def start(self) -> None:
        self.server = await asyncssh.create_server(
            lambda: Gateway(self.p, self.registry),
            self.host,
            self.port,
            server_host_keys=[host_key(self.p.settings.data_dir)],
            encoding=None,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,  # scp runs inside the sandbox (as a command), never in this process
            line_editor=False,
            keepalive_interval=30,
            login_timeout=60,
        )
        if self.port == 0:
            self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
