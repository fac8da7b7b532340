"""``danlu exec`` and ``danlu shell``: sessions into a running instance over the server's
WebSocket (danlu.access.protocol; docs/access.md)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
from typing import Any
from urllib.parse import urlencode, urlsplit

import typer

from danlu.access import protocol
from danlu.cli.client import Client
from danlu.cli.job_cmds import job_app
from danlu.cli.output import JsonOpt, console, err_console, fail, print_json


def _connect(client: Client, instance_id: str, params: list[tuple[str, str]], kind: str = "instances") -> Any:
    from websockets.exceptions import InvalidHandshake, InvalidURI
    from websockets.sync.client import connect

    base = client.url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    url = f"{base}/api/v1/{kind}/{instance_id}/exec?{urlencode(params)}"
    headers = {"Authorization": f"Bearer {client.token}"} if client.token else {}
    try:
        return connect(url, additional_headers=headers, subprotocols=[protocol.SUBPROTOCOL], max_size=None,  # type: ignore[list-item]
                       open_timeout=60, ping_interval=20, ping_timeout=60, compression=None)  # fmt: skip
    except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
        fail(f"cannot reach the danlu server at {client.url} ({exc}); start it with `make run` or set DANLU_URL")


def _status(payload: bytes) -> int:
    body = json.loads(payload)
    if "error" in body:
        err = body["error"]
        fail(err.get("message", "the session was refused"), err.get("code"), exit_code=1)
    return int(body.get("exit_code") or 0)


def _frames(ws: Any) -> Any:
    from websockets.exceptions import ConnectionClosed

    try:
        for message in ws:
            if isinstance(message, bytes) and message:
                yield message[0], message[1:]
    except ConnectionClosed:
        return


def exec_(
    instance_id: str = typer.Argument(..., help="The running instance."),
    command: list[str] = typer.Argument(..., help="The command and its arguments (after --)."),
    stdin: bool = typer.Option(False, "--stdin", "-i", help="Send this terminal's standard input to the command."),
    as_json: bool = JsonOpt,
) -> None:
    """Run a command in a running instance, in its sandbox; its output streams back as it comes and
    `danlu exec` exits with its exit code (``--json``: ``{"exit_code", "stdout", "stderr"}`` at the end)."""
    _exec(instance_id, command, stdin, as_json, "instances")


def job_exec(
    job_id: str = typer.Argument(..., help="The running job."),
    command: list[str] = typer.Argument(..., help="The command and its arguments (after --)."),
    stdin: bool = typer.Option(False, "--stdin", "-i", help="Send this terminal's standard input to the command."),
    as_json: bool = JsonOpt,
) -> None:
    """Run a command in a running job's current run (as `danlu exec` does for an instance)."""
    _exec(job_id, command, stdin, as_json, "jobs")


def _exec(object_id: str, command: list[str], stdin: bool, as_json: bool, kind: str) -> None:
    client = Client()
    ws = _connect(client, object_id, [("command", c) for c in command], kind)
    if stdin:
        threading.Thread(target=_send_stdin, args=(ws,), daemon=True).start()
    else:
        ws.send(bytes((protocol.CLOSE,)))
    out, err, code = bytearray(), bytearray(), None
    for channel, payload in _frames(ws):
        if channel == protocol.STDOUT:
            out += payload if as_json else b""
            if not as_json:
                sys.stdout.buffer.write(payload)
                sys.stdout.buffer.flush()
        elif channel == protocol.STDERR:
            err += payload if as_json else b""
            if not as_json:
                sys.stderr.buffer.write(payload)
                sys.stderr.buffer.flush()
        elif channel == protocol.STATUS:
            code = _status(payload)
    if code is None:
        fail("the session ended without an exit status (the server or the instance went away)", "session_lost")
    if as_json:
        print_json({"exit_code": code, "stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace")})
    raise typer.Exit(code)


def _send_stdin(ws: Any) -> None:
    from websockets.exceptions import ConnectionClosed

    try:
        while chunk := os.read(0, 65536):
            ws.send(protocol.frame(protocol.STDIN, chunk))
        ws.send(bytes((protocol.CLOSE,)))
    except (OSError, ConnectionClosed):
        return


def shell(
    instance_id: str = typer.Argument(..., help="The running instance."),
    command: list[str] = typer.Argument(None, help="A program to run instead of the login shell (after --)."),
) -> None:
    """An interactive terminal in a running instance (a login shell, in its sandbox): line editing,
    colours, Ctrl-C to the remote program, window resizes. `exit` ends it; the instance runs on."""
    _shell(instance_id, command, "instances")


def job_shell(
    job_id: str = typer.Argument(..., help="The running job."),
    command: list[str] = typer.Argument(None, help="A program to run instead of the login shell (after --)."),
) -> None:
    """An interactive terminal in a running job's current run (as `danlu shell` for an instance)."""
    _shell(job_id, command, "jobs")


def _shell(object_id: str, command: list[str] | None, kind: str) -> None:
    if not (os.isatty(0) and os.isatty(1)):
        fail("danlu shell needs a terminal; use `danlu exec ID -- CMD` in scripts", "not_a_terminal")
    import termios
    import tty

    client = Client()
    cols, rows = shutil.get_terminal_size()
    params = [("tty", "true"), ("cols", str(cols)), ("rows", str(rows)), *[("command", c) for c in command or []]]
    ws = _connect(client, object_id, params, kind)
    saved = termios.tcgetattr(0)

    def resized(*_: object) -> None:
        c, r = shutil.get_terminal_size()
        try:
            ws.send(protocol.frame(protocol.RESIZE, json.dumps({"cols": c, "rows": r}).encode()))
        except Exception:
            pass

    code: int | None = None
    try:
        tty.setraw(0)
        signal.signal(signal.SIGWINCH, resized)
        threading.Thread(target=_send_keys, args=(ws,), daemon=True).start()
        for channel, payload in _frames(ws):
            if channel == protocol.STDOUT:
                os.write(1, payload)
            elif channel == protocol.STATUS:
                termios.tcsetattr(0, termios.TCSADRAIN, saved)
                code = _status(payload)
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
    if code is None:
        fail("the session ended without an exit status (the server or the instance went away)", "session_lost")
    raise typer.Exit(code)


def _send_keys(ws: Any) -> None:
    from websockets.exceptions import ConnectionClosed

    try:
        while chunk := os.read(0, 4096):
            ws.send(protocol.frame(protocol.STDIN, chunk))
    except (OSError, ConnectionClosed):
        return


def port(
    instance_id: str = typer.Argument(..., help="The running instance."),
    number: int = typer.Argument(None, help="The port your app listens on inside it (none: every listening port)."),
    link: bool = typer.Option(False, "--link", help="Make a link to PORT's app for someone without an account."),
    links: bool = typer.Option(False, "--links", help="List the instance's links still in force."),
    revoke: int = typer.Option(None, "--revoke", metavar="LINK_ID", help="Revoke a link (its id from --links)."),
    as_json: bool = JsonOpt,
) -> None:
    """The URL of a web app running in the instance (JupyterLab, TensorBoard …), through danlu: open
    it signed in to the console (or send your token). ``url`` takes danlu's prefix off the path;
    ``absolute_url`` keeps it, for an app told its base URL (``jupyter lab --ServerApp.base_url=…``).
    ``--link`` makes a URL that opens that app (and nothing else) for whoever holds it, until
    ``--revoke``; it is shown once."""
    client = Client()
    if links or revoke is not None:
        if revoke is not None:
            client.delete(f"/instances/{instance_id}/links/{revoke}")
            console.print(f"revoked link {revoke}: it is refused from now on, its open sockets end within 15 s")
            return
        found = client.get(f"/instances/{instance_id}/links")
        if as_json:
            print_json(found)
            return
        if not found:
            console.print(f"no links to {instance_id}'s apps: make one with `danlu port {instance_id} PORT --link`")
        for k in found:
            console.print(f"{k['id']:>4}  port {k['port']:<5}  by {k['created_by']}", markup=False, highlight=False)
        return
    if link:
        if number is None:
            raise typer.BadParameter("say which port the link opens: danlu port ID PORT --link")
        made = client.post(f"/instances/{instance_id}/ports/{number}/links")
        if as_json:
            print_json(made)
            return
        console.print(made["url"], markup=False, highlight=False)
        console.print(f"(link {made['id']}: shown once; `danlu port {instance_id} --revoke {made['id']}` ends it)")
        return
    if number is None:
        found = client.get(f"/instances/{instance_id}/ports")
        if as_json:
            print_json(found)
            return
        if not found["listening"]:
            console.print(f"nothing listens inside {instance_id} yet: start your app on 127.0.0.1:PORT")
        for p in found["listening"]:
            console.print(f"{p['port']:>5}  {p['url']}", markup=False, highlight=False)
        return
    shown = client.get(f"/instances/{instance_id}/ports/{number}")
    if as_json:
        print_json(shown)
        return
    console.print(shown["url"], markup=False, highlight=False)
    base_path = urlsplit(shown["absolute_url"]).path
    console.print(
        f"(an app that needs its base URL, such as JupyterLab: --ServerApp.base_url={base_path}"
        f" and open {shown['absolute_url']})",
        markup=False,
        highlight=False,
    )


def forward(
    instance_id: str = typer.Argument(..., help="The running instance."),
    ports: str = typer.Argument(..., help="REMOTE, or LOCAL:REMOTE: listen on 127.0.0.1:LOCAL here."),
) -> None:
    """Tunnel a port of the instance to this machine (as ``kubectl port-forward``): each connection
    to 127.0.0.1:LOCAL here reaches 127.0.0.1:REMOTE inside the instance, through danlu. Ctrl-C ends it."""
    import socket

    local_text, _, remote_text = ports.rpartition(":")
    if not remote_text.isdigit() or (local_text and not local_text.isdigit()):
        fail("ports are REMOTE or LOCAL:REMOTE, whole numbers 1–65535", "invalid_port")
    remote, local = int(remote_text), int(local_text or remote_text)
    client = Client()
    client.get(f"/instances/{instance_id}/ports/{remote}")  # refused here, with its reason, before listening
    listener = socket.create_server(("127.0.0.1", local))
    console.print(f"forwarding 127.0.0.1:{listener.getsockname()[1]} → {instance_id}:{remote} (Ctrl-C to stop)")
    try:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=_tunnel, args=(client, instance_id, remote, conn), daemon=True).start()
    except KeyboardInterrupt:
        pass
    finally:
        listener.close()


def _tunnel(client: Client, instance_id: str, remote: int, conn: Any) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    base = client.url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    headers = {"Authorization": f"Bearer {client.token}"} if client.token else {}
    try:
        ws = connect(f"{base}/api/v1/instances/{instance_id}/ports/{remote}/tunnel", additional_headers=headers,
                     max_size=None, open_timeout=60)  # fmt: skip
    except Exception:
        conn.close()
        return

    def up() -> None:
        try:
            while data := conn.recv(65536):
                ws.send(data)
        except (OSError, ConnectionClosed):
            pass
        finally:
            ws.close()

    threading.Thread(target=up, daemon=True).start()
    try:
        for message in ws:
            if isinstance(message, bytes):
                conn.sendall(message)
    except (OSError, ConnectionClosed):
        pass
    finally:
        conn.close()
    if (ws.close_code or 0) >= 4000:  # refused: the reason is the close's
        err_console.print(f"error: {ws.close_reason}", markup=False, highlight=False)


key_app = typer.Typer(help="Your SSH public keys for the gateway (ssh -p PORT INSTANCE@HOST).", no_args_is_help=True)


@key_app.command("add")
def key_add(
    file: str = typer.Argument(..., help="A public key file, e.g. ~/.ssh/id_ed25519.pub (never the private key)."),
    name: str = typer.Option(None, "--name", help="A name for it (default: the key's comment)."),
    as_json: bool = JsonOpt,
) -> None:
    """Register a public key; `danlu ssh ID` then connects with it."""
    try:
        with open(os.path.expanduser(file), encoding="utf-8", errors="replace") as f:
            text = f.read(20_000)
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", "file_unreadable")
    added = Client().post("/ssh-keys", json={"public_key": text, "name": name})
    if as_json:
        print_json(added)
        return
    console.print(f"added key {added['id']} {added['name']} {added['fingerprint']}", markup=False, highlight=False)


@key_app.command("list")
def key_list(as_json: bool = JsonOpt) -> None:
    """Your registered keys."""
    found = Client().get("/ssh-keys")
    if as_json:
        print_json(found)
        return
    if not found:
        console.print("no keys yet: danlu key add ~/.ssh/id_ed25519.pub")
    for k in found:
        line = f"{k['id']:>4}  {k['fingerprint']}  {k['name']}  {k['created_at']}"
        console.print(line, markup=False, highlight=False)


@key_app.command("rm")
def key_rm(key_id: int = typer.Argument(..., help="The key's id (danlu key list).")) -> None:
    """Remove a key: new connections with it are refused, open ones end within 15 s."""
    Client().delete(f"/ssh-keys/{key_id}")
    console.print(f"removed key {key_id}")


def ssh(
    instance_id: str = typer.Argument(..., help="The running instance (or job)."),
    port: int = typer.Option(2222, "--port", "-p", envvar="DANLU_SSH_PORT", help="The gateway's port."),
    key: str = typer.Option(None, "--identity", "-i", help="The private key to use (default: ssh's own)."),
    run: bool = typer.Option(False, "--run", help="Run ssh now instead of printing the command."),
    extra: list[str] = typer.Argument(None, help="More ssh arguments or a command (after --)."),
) -> None:
    """The ssh command that reaches the instance through danlu's gateway (``--run``: run it)."""
    host = urlsplit(Client().url).hostname or "127.0.0.1"
    argv = ["ssh", "-p", str(port), *(["-i", key] if key else []), f"{instance_id}@{host}", *(extra or [])]
    if not run:
        console.print(" ".join(argv), markup=False, highlight=False)
        return
    os.execvp("ssh", argv)


def register(app: typer.Typer) -> None:
    app.command("exec")(exec_)  # options before --, the command after it (as kubectl exec)
    app.command("shell")(shell)
    app.command("port")(port)
    app.command("forward")(forward)
    job_app.command("exec")(job_exec)
    job_app.command("shell")(job_shell)
    app.add_typer(key_app, name="key")
    app.command("ssh")(ssh)
