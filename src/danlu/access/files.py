"""Files in and out of a running instance over plain HTTP (issue 26, item 1: the API's endpoints and the
console's upload, download and folder pages; ``danlu cp`` streams tar over an exec session instead,
docs/access.md "Files").

Every operation is a short command run *inside* the rental's sandbox as the renter's uid, through the same
``Backend.enter`` as a shell (danlu.access.sessions): the server never opens a path of the renter's
workspace itself, so a symlink or hard link the renter made cannot lead it out (there is no outside in the
sandbox), an upload is written with the renter's uid and counts against the workspace's disk limit (the
kernel's, where the workspace is a file system of its own: ``ENOSPC`` answers ``409 disk_limit``), and an
upload whose declared size is over the free space is refused before a byte is written. Both directions
stream in constant memory; an upload is written to a temporary name beside its target, its SHA-256 taken
in the sandbox and compared with the one computed here while it streamed (and the client's
``X-Content-SHA256``, when sent) before it is renamed into place: a broken or altered upload never replaces
a file. A folder downloads as a tar stream."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from danlu.access import sessions
from danlu.access.filescripts import (
    ABORT,
    DOWNLOAD,
    FINISH,
    LISTING,
    PART_APPEND,
    PART_FINISH,
    PART_SIZE,
    STAT,
    UPLOAD,
)
from danlu.access.service import Target
from danlu.access.transfer import Transfers, files_target
from danlu.backend import Backend, EnterError
from danlu.compute import workspace_size
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.db.models import Instance, User

CHUNK = 1 << 20
MAX_PATH = 4096
MAX_ENTRIES = 2000  # a folder page lists this many entries at most
ERR_BYTES = 4096
RANGE = re.compile(r"^bytes=(\d{1,18})-(\d{0,18})$")


def open_target(p: Platform, user: User, instance_id: str, registry: sessions.Registry, transfers: Transfers) -> Target:
    """Where ``user``'s files request runs (the rental's sandbox, or a stopped rental's transfer sandbox),
    admitted as one of its sessions (a files request counts with its shells: one renter cannot open a thousand);
    the caller leaves the registry after."""
    t = files_target(p, user, instance_id, transfers)
    registry.admit(t.instance_id)
    return t


@contextmanager
def admitted(
    p: Platform, user: User, instance_id: str, registry: sessions.Registry, transfers: Transfers
) -> Iterator[Target]:
    """:func:`open_target` for the length of a ``with`` block."""
    t = open_target(p, user, instance_id, registry, transfers)
    try:
        yield t
    finally:
        registry.leave(t.instance_id)


def check_path(path: str) -> str:
    """A path in the instance: relative ones are under its workspace (its ``HOME`` and working folder)."""
    if not path or len(path) > MAX_PATH or "\0" in path:
        raise InvalidInput("invalid_path", f"a path is 1 to {MAX_PATH} characters without NUL, e.g. data/train.csv")
    return path


def _start(backend: Backend, t: Target, script: str, *args: str) -> sessions.SessionProcess:
    try:
        sp = sessions.start(backend, t, ["sh", "-c", script, "sh", *args], tty=False, size=(80, 24))
    except EnterError as exc:
        raise sessions.enter_error(exc) from None
    for fd in (sp.stdin, sp.stdout, sp.stderr):
        if fd is not None and fd != -1:
            os.set_blocking(fd, True)
    return sp


def _drain(fd: int | None, limit: int = 1 << 20) -> bytes:
    out = bytearray()
    while fd is not None and fd != -1 and len(out) < limit and (data := os.read(fd, 65536)):
        out += data
    return bytes(out)


def _collect(sp: sessions.SessionProcess) -> tuple[int, bytes, str]:
    """A command to its end, its input closed: exit code, stdout (≤ 1 MiB), the end of stderr."""
    try:
        sp.close_stdin()
        out = _drain(sp.stdout)
        err = _drain(sp.stderr, ERR_BYTES)
        return sp.proc.wait(), out, err.decode(errors="replace").strip()[-500:]
    finally:
        sp.kill()
        sp.close()


def _run(backend: Backend, t: Target, script: str, *args: str) -> tuple[int, bytes, str]:
    """A short command to its end (:func:`_collect`)."""
    return _collect(_start(backend, t, script, *args))


@dataclass
class Download:
    kind: str  # file | folder
    name: str  # what the browser saves it as
    chunks: Iterator[bytes]
    close: Callable[[], None]  # idempotent: ends the command (a response whose client left never iterates)
    size: int | None = None  # a file's whole size


def parse_range(header: str | None) -> tuple[int, int | None] | None:
    """``Range: bytes=START-`` or ``bytes=START-END`` (one range): (offset, length or None). Any other form — a
    suffix range, several ranges — is ignored and the whole file sent, as RFC 9110 allows."""
    m = RANGE.match(header or "")
    if m is None:
        return None
    start, end = int(m.group(1)), m.group(2)
    if end == "":
        return start, None
    return (start, int(end) - start + 1) if int(end) >= start else None


def download(backend: Backend, t: Target, path: str, offset: int = 0, length: int | None = None) -> Download:
    """A file's bytes (from ``offset``, ``length`` of them: a resumed download), or a folder as a tar stream;
    read as it is sent, in constant memory."""
    sp = _start(backend, t, DOWNLOAD, check_path(path), str(offset), str(-1 if length is None else length))
    sp.close_stdin()

    def close() -> None:  # the end, or the client went away: nothing of it is left running (idempotent)
        sp.kill()
        sp.close()

    first = b""
    while len(first) < 32 and not first.endswith(b"\n") and (byte := os.read(sp.stdout, 1)):
        first += byte
    if first[:1] not in (b"D", b"F") or not first.endswith(b"\n"):
        err = _drain(sp.stderr, ERR_BYTES).decode(errors="replace").strip()
        close()
        raise NotFound("file_not_found", f"{err or f'no such file or folder: {path}'} (in {t.instance_id})")
    base = os.path.basename(os.path.normpath(path)) if path not in (".", "/") else t.instance_id
    kind = "folder" if first[:1] == b"D" else "file"
    size = int(first[1:].strip()) if kind == "file" and first[1:].strip().isdigit() else None

    def chunks() -> Iterator[bytes]:
        try:
            while data := os.read(sp.stdout, CHUNK):
                yield data
        finally:
            close()

    return Download(kind, base + (".tar" if kind == "folder" else ""), chunks(), close, size)


class _Writing:
    """A file command in the sandbox fed chunk by chunk on its stdin (from a request body as it arrives)."""

    sp: sessions.SessionProcess
    broken = False

    def feed(self, chunk: bytes) -> bool:
        """False once the command stopped reading (the disk is full, the folder is not writable, …)."""
        view = memoryview(chunk)
        try:
            while view and not self.broken:
                view = view[os.write(self.sp.stdin, view) :]
        except OSError:  # EPIPE: it ended
            self.broken = True
        return not self.broken

    def finish(self) -> object:
        raise NotImplementedError

    def abandon(self) -> None:
        """The client went away mid-upload: the command ends as ``finish`` ends it, its refusal unsaid."""
        self.broken = True
        try:
            self.finish()
        except (Conflict, InvalidInput):
            pass


class Upload(_Writing):
    """An upload under way: fed chunk by chunk, then finished (on abandon its temporary file goes with it)."""

    def __init__(self, backend: Backend, t: Target, path: str) -> None:
        self.backend, self.t, self.path = backend, t, check_path(path)
        self.sp = _start(backend, t, UPLOAD, self.path)
        self.hash = hashlib.sha256()
        self.bytes = 0

    def feed(self, chunk: bytes) -> bool:
        if self.broken or not chunk:
            return not self.broken
        self.hash.update(chunk)
        self.bytes += len(chunk)
        return super().feed(chunk)

    def finish(self, expected_sha256: str | None = None) -> dict[str, object]:
        """Compare the checksums and rename it into place; raises (and removes the temporary file) when
        the upload failed or its bytes differ."""
        code, raw, err = _collect(self.sp)
        out = raw.decode(errors="replace").removesuffix("\n").split("\n")
        if code != 0 or len(out) < 2:
            if _disk_full(err):
                raise _too_large(self.t, self.path)
            raise Conflict("upload_failed", f"could not write {self.path}: {err or f'exit {code}'}")
        sandbox_sha, temp = out[0].strip(), "\n".join(out[1:])  # a folder's name may hold a newline
        ours = self.hash.hexdigest()
        if sandbox_sha != ours or (expected_sha256 is not None and expected_sha256.lower() != ours):
            _run(self.backend, self.t, ABORT, temp)
            raise InvalidInput(
                "checksum_mismatch",
                f"the upload of {self.path} arrived with SHA-256 {ours}, written {sandbox_sha}"
                + (f", sent as {expected_sha256}" if expected_sha256 else "")
                + "; nothing was replaced: send it again",
            )
        code, _, err = _run(self.backend, self.t, FINISH, temp, self.path)
        if code != 0:
            _run(self.backend, self.t, ABORT, temp)
            raise Conflict("upload_failed", f"could not write {self.path}: {err or f'exit {code}'}")
        return {"path": self.path, "bytes": self.bytes, "sha256": ours}


def _disk_full(err: str) -> bool:
    """ENOSPC (the kernel's limit), EDQUOT, EFBIG (RLIMIT_FSIZE: one file past the limit)."""
    return any(s in err for s in ("No space left", "Disk quota", "File too large", "File size limit"))


def _too_large(t: Target, path: str) -> Conflict:
    return Conflict(
        "disk_limit",
        f"{path} does not fit in {t.instance_id}'s workspace (its disk limit); "
        "remove files or start it on more GPUs for more disk",
    )


@dataclass(frozen=True)
class Stat:
    path: str
    kind: str  # file | folder | link | other
    bytes: int
    sha256: str | None  # a file's, when asked for
    version: str | None = None  # a file's mtime, ctime and inode, read before its SHA-256: any write changes it


def stat(backend: Backend, t: Target, path: str, sha256: bool = False) -> Stat:
    """What ``path`` is in the instance, as the renter sees it; with ``sha256`` a file's checksum (read whole)."""
    code, out, err = _run(backend, t, STAT, check_path(path), "1" if sha256 else "0")
    lines = out.decode(errors="replace").split("\n")
    head = lines[0].split() if lines else []
    if code != 0 or len(head) not in (2, 3) or not head[1].isdigit():
        raise NotFound("file_not_found", f"{err or f'no such file or folder: {path}'} (in {t.instance_id})")
    digest = lines[1].strip() if sha256 and head[0] == "file" and len(lines) > 1 else None
    return Stat(path, head[0], int(head[1]), digest or None, head[2] if len(head) == 3 else None)


# -- resumable uploads ----------------------------------------------------------------------------------------
# A large file is uploaded into a partial file beside its target, named from the target's path and the whole
# file's SHA-256 (which the client declares first): however often the connection drops, the client asks how much
# arrived (``upload_state``) and sends the rest from there (``PartUpload``); the last byte in, the partial's
# SHA-256 is taken in the sandbox and only a match is renamed into place. ``danlu cp`` uses it for large files.
@dataclass(frozen=True)
class UploadState:
    path: str
    sha256: str
    length: int
    received: int
    done: bool


def part_name(path: str, sha256: str) -> str:
    return ".danlu-part-" + hashlib.sha256(f"{path}\0{sha256.lower()}".encode()).hexdigest()[:32]


def upload_state(backend: Backend, t: Target, path: str, sha256: str, length: int) -> UploadState:
    code, out, err = _run(backend, t, PART_SIZE, check_path(path), part_name(path, sha256))
    size = out.decode(errors="replace").strip()
    if code != 0 or not size.isdigit():
        raise Conflict("upload_failed", f"could not read the upload of {path} so far: {err or f'exit {code}'}")
    return UploadState(path, sha256.lower(), length, int(size), False)


class PartUpload(_Writing):
    """The rest of a resumable upload from ``offset`` (exactly what has arrived: else 409
    ``upload_offset_mismatch`` with the size to send from), appended chunk by chunk; ``finish`` renames the file
    into place once all ``length`` bytes are there and their SHA-256 is the one declared. Abandoned, what arrived
    stays in the partial file, to resume from."""

    def __init__(self, backend: Backend, t: Target, path: str, sha256: str, length: int, offset: int) -> None:
        self.backend, self.t, self.path = backend, t, check_path(path)
        self.sha256, self.length, self.offset = sha256.lower(), length, offset
        self.part = part_name(path, sha256)
        self.sp = _start(backend, t, PART_APPEND, self.path, self.part, str(offset))
        # from byte 0, the bytes are hashed here as they pass (in parallel with the sending): the file is not read
        # again at the end unless the upload was resumed (a hash's state cannot be kept between attempts)
        self.hash = hashlib.sha256() if offset == 0 else None
        self.bytes = 0

    def feed(self, chunk: bytes) -> bool:
        if self.hash is not None and not self.broken:
            self.hash.update(chunk)
            self.bytes += len(chunk)
        return super().feed(chunk)

    def finish(self) -> UploadState:
        code, raw, err = _collect(self.sp)
        if code == 6:
            raise Conflict("upload_in_progress", f"another attempt is still writing {self.path}: ask again shortly")
        if code == 4:
            have = err.strip().split("\n")[-1]
            raise Conflict(
                "upload_offset_mismatch",
                f"{have} bytes of {self.path} have arrived, not {self.offset}: send from byte {have}",
            )
        if code != 0:
            if _disk_full(err):
                raise _too_large(self.t, self.path)
            raise Conflict("upload_failed", f"could not write {self.path}: {err or f'exit {code}'}")
        received = int(raw.decode(errors="replace").strip() or 0)
        if received > self.length:
            _run(self.backend, self.t, ABORT, f"{os.path.dirname(self.path) or '.'}/{self.part}")
            raise InvalidInput(
                "upload_too_long",
                f"{received} bytes arrived for {self.path}, declared as {self.length}: nothing was kept; send it again",
            )
        if received < self.length:
            return UploadState(self.path, self.sha256, self.length, received, False)
        seen = self.hash.hexdigest() if self.hash is not None and self.bytes == received else ""
        code, raw, err = _run(self.backend, self.t, PART_FINISH, self.path, self.part, self.sha256, seen, str(received))
        if code == 6:
            raise Conflict("upload_in_progress", f"another attempt is still writing {self.path}: ask again shortly")
        if code == 5:
            raise InvalidInput(
                "checksum_mismatch",
                f"the upload of {self.path} arrived with SHA-256 {raw.decode(errors='replace').strip()}, declared as "
                f"{self.sha256}; nothing was replaced and the partial upload was removed: send it again",
            )
        if code != 0:
            raise Conflict("upload_failed", f"could not write {self.path}: {err or f'exit {code}'}")
        return UploadState(self.path, self.sha256, self.length, received, True)


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # file | folder | link | other
    bytes: int
    modified_s: int


KINDS = {"f": "file", "d": "folder", "l": "link"}


def listing(backend: Backend, t: Target, path: str) -> tuple[list[Entry], bool]:
    """A folder's entries (folders first, then by name) and whether there were more than ``MAX_ENTRIES``."""
    code, out, err = _run(backend, t, LISTING, check_path(path))
    if code != 0 and not out:
        raise NotFound("file_not_found", f"{err or f'no such folder: {path}'} (in {t.instance_id})")
    entries = []
    for record in out.split(b"\0"):
        fields = record.decode(errors="replace").split("\t", 3)
        if len(fields) != 4:
            continue
        kind, size, mtime, name = fields
        entries.append(Entry(name, KINDS.get(kind, "other"), int(size or 0), int(float(mtime or 0))))
    entries.sort(key=lambda e: (e.kind != "folder", e.name))
    return entries[:MAX_ENTRIES], len(entries) > MAX_ENTRIES


def free_bytes(p: Platform, instance_id: str) -> int | None:
    """What the workspace can still take (None: no limit known): the file system's own free space where it
    is one of its own (the kernel's limit), else the limit less what the workspace holds."""
    with p.db.read() as s:
        inst = s.get(Instance, instance_id)
        if inst is None:
            return None
        workspace, limits = Path(inst.workspace), json.loads(inst.sandbox_json or "{}")
    if os.path.ismount(workspace):  # its own file system (danlu.compute.sandbox.volume)
        st = os.statvfs(workspace)
        return st.f_bavail * st.f_frsize
    disk_mb = limits.get("disk_mb")
    if not isinstance(disk_mb, int):
        return None
    return max(0, disk_mb * (1 << 20) - workspace_size.workspace_bytes(str(workspace)))


def refuse_if_too_large(p: Platform, instance_id: str, path: str, declared: int | None) -> None:
    """``409 disk_limit`` before a byte is written when the declared size cannot fit."""
    if declared is None:  # chunked: the disk limit stops it as it is written
        return
    free = free_bytes(p, instance_id)
    if free is not None and declared > free:
        raise Conflict(
            "disk_limit",
            f"{path} ({declared >> 20} MiB) does not fit: {instance_id}'s workspace has {free >> 20} MiB free of "
            "its disk limit; remove files or start it on more GPUs for more disk",
        )
