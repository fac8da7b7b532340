"""``danlu cp``: files and folders in and out of a running instance (issue 26, first part), over the same
exec sessions as ``danlu exec`` (docs/access.md "Files"), as ``kubectl cp`` does: a tar stream into or out
of ``tar`` running *inside* the rental's sandbox, as the renter's uid, so the copy reaches exactly what the
renter's own code reaches (no link is followed out of the sandbox: there is no outside there) and counts
against its limits. Both ends stream: constant memory however large the tree. Every regular file is
checked end to end with SHA-256 (``sha256sum`` in the instance, hashlib here).

Downloads are unpacked here with tarfile's ``data`` filter: an archive that the rental's (possibly hostile)
code made cannot write outside the destination, through ``..``, an absolute name or a link; such members
are skipped and named. A stopped rental's workspace is copied through its transfer sandbox (only the file
commands run there). One large file goes over the HTTP files API instead, resumably (danlu.cli.resumable_copy).
The console's upload and download: danlu.access.files."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import typer

from danlu.access import filescripts, protocol
from danlu.cli.client import Client
from danlu.cli.output import console, err_console, fail, print_json
from danlu.cli.resumable_copy import RESUMABLE_MIN, download_file, partial_waits, remote_stat, upload_file
from danlu.cli.session_cmds import _connect, _frames, _status

REMOTE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,127}):(.*)$")
CHUNK = protocol.MAX_FRAME_BYTES  # one STDIN frame at most
MiB = 1 << 20


def parse_spec(text: str) -> tuple[str | None, str]:
    """``ID:PATH`` (a path in the instance; relative to its workspace) or a local path (``./a:b`` for a local
    name with a colon)."""
    m = REMOTE.match(text)
    if m is None:
        return None, text
    return m.group(1), m.group(2) or "."


class _Session:
    """One exec session: the command's stdout as a stream (``read``), stderr kept, the exit code at the end."""

    def __init__(self, client: Client, instance_id: str, command: list[str]) -> None:
        self.ws = _connect(client, instance_id, [("command", c) for c in command])
        self._frames = _frames(self.ws)
        self._buf = b""
        self.err = bytearray()
        self.code: int | None = None

    def send_all(self, chunks: Iterator[bytes]) -> threading.Thread:
        """Sends ``chunks`` as the command's stdin, then EOF, on a thread (the command's output is read meanwhile)."""

        def pump() -> None:
            from websockets.exceptions import ConnectionClosed

            try:
                for chunk in chunks:
                    for i in range(0, len(chunk), CHUNK):
                        self.ws.send(protocol.frame(protocol.STDIN, chunk[i : i + CHUNK]))
                self.ws.send(bytes((protocol.CLOSE,)))
            except ConnectionClosed:
                return

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        return t

    def no_stdin(self) -> None:
        self.ws.send(bytes((protocol.CLOSE,)))

    def read(self, n: int = -1) -> bytes:
        while not self._buf and self.code is None:
            try:
                channel, payload = next(self._frames)
            except StopIteration:
                break
            if channel == protocol.STDOUT:
                self._buf = payload
            elif channel == protocol.STDERR:
                self.err += payload
            elif channel == protocol.STATUS:
                self.code = _status(payload)
        if n < 0 or n >= len(self._buf):
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def finish(self) -> tuple[int, bytes]:
        """Reads to the end: (exit code, all the stdout not read yet)."""
        rest = bytearray()
        while chunk := self.read():
            rest += chunk
        if self.code is None:
            fail("the session ended without an exit status (the server or the instance went away)", "session_lost")
        return self.code, bytes(rest)


def _run(client: Client, iid: str, script: str, *args: str) -> tuple[int, bytes, bytes]:
    s = _Session(client, iid, ["sh", "-c", script, "danlu-cp", *args])
    s.no_stdin()
    code, out = s.finish()
    return code, out, bytes(s.err)


def _remote_hashes(client: Client, iid: str, root: str, name: str) -> dict[str, str]:
    code, out, err = _run(client, iid, filescripts.CP_HASHES, root, name)
    if code != 0:
        fail(f"could not check the copy in the instance: {err.decode(errors='replace').strip()}", "copy_unverified")
    hashes = {}
    for entry in out.split(b"\0"):
        if entry:
            digest, _, path = entry.partition(b"  ")
            hashes[path.decode(errors="surrogateescape")] = digest.decode()
    return hashes


def _progress(total: int, show: bool) -> tuple[Callable[[int], None], Callable[[], None]]:
    if not show:
        return (lambda n: None), (lambda: None)
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    bar = Progress(BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=err_console, transient=True)
    task = bar.add_task("copy", total=total or None)
    bar.start()
    return (lambda n: bar.advance(task, n)), bar.stop


def _local_tree(path: Path) -> Iterator[Path]:
    yield path
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                yield Path(root) / name


class _Hashing:
    def __init__(self, f: IO[bytes], advance: Callable[[int], None]) -> None:
        self.f, self.h, self.advance = f, hashlib.sha256(), advance

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.h.update(data)
        self.advance(len(data))
        return data


class _Sink:
    """tarfile's output: its small writes gathered into 256 KiB stdin chunks for the session (through a
    bounded queue: memory stays constant)."""

    def __init__(self) -> None:
        import queue

        self.q: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self.buf = bytearray()

    def write(self, data: bytes) -> int:
        self.buf += data
        if len(self.buf) >= 256 << 10:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.buf:
            self.q.put(bytes(self.buf))
            self.buf.clear()

    def close(self) -> None:
        self.flush()
        self.q.put(None)

    def chunks(self) -> Iterator[bytes]:
        while (chunk := self.q.get()) is not None:
            yield chunk


def upload(client: Client, local: Path, iid: str, remote: str, show: bool) -> dict[str, Any]:
    import tarfile

    if not local.exists() and not local.is_symlink():
        fail(f"{local} does not exist here", "invalid_copy")
    tree = list(_local_tree(local))
    total = sum(p.stat().st_size for p in tree if p.is_file() and not p.is_symlink())
    info = client.get(f"/instances/{iid}")
    if info["status"] in ("pending", "stopping", "destroyed"):  # running or stopped: the server decides
        fail(f"instance {iid} is {info['status']}: files are copied into a running or stopped instance",
             "instance_not_running")  # fmt: skip
    _, out, _ = _run(client, iid, filescripts.CP_PROBE, remote)
    lines = out.decode().split("\n")
    used = 1024 * sum(int(x.split()[0]) for x in lines[1:] if x.split() and x.split()[0].isdigit())
    limit = int((info.get("sandbox") or {}).get("disk_mb") or 0) * MiB
    if limit and used + total > limit:
        fail(f"copying {total / MiB:.1f} MiB would take the instance's disk past its limit: {used / MiB:.1f} of "
             f"{limit / MiB:.0f} MiB used; remove files there first or rent more GPUs for more disk",
             "disk_limit")  # fmt: skip
    if lines[0] == "dir":
        root, name = remote, local.name
    else:
        root, name = os.path.dirname(remote.rstrip("/")) or ".", os.path.basename(remote.rstrip("/"))
    session = _Session(client, iid, ["sh", "-c", filescripts.CP_UNPACK, "danlu-cp", root])
    sink = _Sink()
    sender = session.send_all(sink.chunks())
    advance, done = _progress(total, show)
    hashes: dict[str, str] = {}
    try:
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for p in tree:
                arc = name if p == local else f"{name}/{p.relative_to(local).as_posix()}"
                ti = tar.gettarinfo(str(p), arcname=arc)
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                if ti.isreg():
                    with open(p, "rb") as f:
                        reader = _Hashing(f, advance)
                        tar.addfile(ti, reader)  # type: ignore[arg-type]
                        hashes[arc] = reader.h.hexdigest()
                else:
                    tar.addfile(ti)
    finally:
        sink.close()
        done()
    sender.join()
    code, _ = session.finish()
    if code != 0:
        fail(f"tar in the instance failed (exit {code}): {session.err.decode(errors='replace').strip()[-500:]}",
             "copy_failed")  # fmt: skip
    there = _remote_hashes(client, iid, root, name)
    bad = sorted(k for k, v in hashes.items() if there.get(k) != v)
    if bad:
        fail(f"{len(bad)} file(s) differ after the copy (SHA-256), e.g. {bad[0]}; copy again", "copy_corrupted")
    return {"files": len(hashes), "bytes": total, "to": f"{iid}:{root.rstrip('/')}/{name}", "sha256_verified": True}


def download(client: Client, iid: str, remote: str, local: Path, show: bool) -> dict[str, Any]:
    import tarfile

    src = remote.rstrip("/") or "/"
    parent, name = os.path.dirname(src) or ".", os.path.basename(src) or "."
    if local.is_dir():
        dest, rename = local, name
    else:
        dest, rename = local.parent if str(local.parent) else Path("."), local.name
        if not dest.is_dir():
            fail(f"{dest} is not a folder here", "invalid_copy")
    session = _Session(client, iid, ["sh", "-c", filescripts.CP_PACK, "danlu-cp", parent, name])
    session.no_stdin()
    advance, done = _progress(0, show)
    skipped: list[str] = []
    got: dict[str, Path] = {}
    try:
        with tarfile.open(fileobj=session, mode="r|") as tar:  # type: ignore[call-overload]
            for m in tar:
                original = m.name
                m.name = rename + m.name[len(name) :] if m.name == name or m.name.startswith(name + "/") else m.name
                try:
                    tar.extract(m, path=dest, filter="data")
                except (tarfile.FilterError, OSError) as exc:
                    skipped.append(f"{original} ({exc})")
                    continue
                if m.isreg():
                    got[original] = dest / m.name
                    advance(m.size)
    except tarfile.ReadError as exc:
        session.finish()
        fail(f"could not read {remote} in the instance ({exc}): {session.err.decode(errors='replace').strip()[-300:]}",
             "copy_failed")  # fmt: skip
    finally:
        done()
    code, _ = session.finish()
    if code != 0:
        fail(f"tar in the instance failed (exit {code}): {session.err.decode(errors='replace').strip()[-500:]}",
             "copy_failed")  # fmt: skip
    there = _remote_hashes(client, iid, parent, name)
    bad = []
    for arc, path in got.items():
        with open(path, "rb") as f:
            if there.get(arc) != hashlib.file_digest(f, "sha256").hexdigest():
                bad.append(arc)
    if bad:
        fail(f"{len(bad)} file(s) differ after the copy (SHA-256), e.g. {sorted(bad)[0]}; copy again", "copy_corrupted")
    for s in skipped:
        err_console.print(f"skipped (would land outside {dest}): {s}", markup=False, highlight=False, soft_wrap=True)
    return {"files": len(got), "bytes": sum(p.stat().st_size for p in got.values()), "to": str(dest / rename),
            "sha256_verified": True, "skipped": skipped}  # fmt: skip


def cp(
    src: str = typer.Argument(..., help="What to copy: a local path, or ID:PATH in a running instance."),
    dst: str = typer.Argument(..., help="Where to: ID:PATH (relative paths start at /workspace), or a local path."),
    progress: bool = typer.Option(None, "--progress/--no-progress", help="A progress bar (default: on a terminal)."),
    resumable: bool = typer.Option(
        False, "--resumable", help="Copy a single file so a broken copy resumes (automatic from 64 MiB)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON instead of a sentence."),
) -> None:
    """Copy files and folders into or out of a running or stopped instance (recursive; every file checked with
    SHA-256). A single file of 64 MiB or more resumes after a dropped connection, or when run again."""
    (src_id, src_path), (dst_id, dst_path) = parse_spec(src), parse_spec(dst)
    if (src_id is None) == (dst_id is None):
        fail("one side is ID:PATH in an instance and the other a local path (use ./name for a local name with ':')",
             "invalid_copy")  # fmt: skip
    show = sys.stderr.isatty() if progress is None else progress
    client = Client()
    if dst_id is not None:
        local = Path(src_path)
        if local.is_file() and not local.is_symlink() and (resumable or local.stat().st_size >= RESUMABLE_MIN):
            advance, done = _progress(local.stat().st_size, show and not as_json)
            try:
                out = upload_file(client, dst_id, local, dst_path, advance)
            finally:
                done()
        else:
            out = upload(client, local, dst_id, dst_path, show and not as_json)
    else:
        assert src_id is not None
        out = _download(client, src_id, src_path, Path(dst_path), resumable, show and not as_json)
    if as_json:
        print_json(out)
        return
    console.print(f"copied {out['files']} file(s), {out['bytes'] / MiB:.1f} MiB → {out['to']} (SHA-256 verified)",
                  markup=False, highlight=False, soft_wrap=True)  # fmt: skip


def _download(client: Client, iid: str, remote: str, local: Path, resumable: bool, show: bool) -> dict[str, Any]:
    """A single file of 64 MiB or more (any size with ``--resumable``, or where a partial copy waits) resumably;
    anything else as a tar stream."""
    there = remote_stat(client, iid, remote)
    if (
        there is not None
        and there["kind"] == "file"
        and (resumable or partial_waits(remote, local) or there["bytes"] >= RESUMABLE_MIN)
    ):
        advance, done = _progress(there["bytes"], show)
        try:
            return download_file(client, iid, remote, there["bytes"], local, advance)
        finally:
            done()
    return download(client, iid, remote, local, show)


def register(app: typer.Typer) -> None:
    app.command("cp")(cp)
