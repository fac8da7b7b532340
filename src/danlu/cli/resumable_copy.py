"""``danlu cp`` of one large file, resumable (issue 26, item 1; docs/access.md "Files"): over the HTTP files API
rather than a tar stream, so that a dropped connection costs only what was in flight.

* **Up**: the file's SHA-256 is taken here first; the server keeps what arrived in a partial file beside the
  target, named from the path and that checksum (``GET …/files/resumable`` says how much); each attempt sends
  the rest from there (``PUT …/files/resumable?offset=N``), and the server renames the partial into place only
  once all bytes are there and its own SHA-256 of them matches.
* **Down**: the bytes collect in ``NAME.danlu-part`` here; each attempt asks for the rest with ``Range``; at the
  end the instance's SHA-256 of the file (``GET …/files/stat?sha256=true``) must match ours, else the partial is
  removed and the command fails (the file changed meanwhile, or arrived corrupted).

A dropped connection is retried at once, a few times, with a growing pause; after that, or after Ctrl-C, the
same ``danlu cp`` resumes where it stopped (the partial files are kept for it).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from danlu.cli.client import Client
from danlu.cli.output import err_console, fail

MiB = 1 << 20
RESUMABLE_MIN = 64 * MiB  # single files from this size go this way (--resumable: any size)
ATTEMPTS = 6
CHUNK = MiB
PART_SUFFIX = ".danlu-part"


def _say(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def _refused(resp: Any) -> NoReturn:
    try:
        err = resp.json()["error"]
    except (ValueError, KeyError, TypeError):
        fail(f"HTTP {resp.status_code}: {resp.text[:200]}", "copy_failed")
    fail(err["message"], err["code"])


def _error_code(resp: Any) -> str:
    try:
        return str(resp.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


def _pause(attempt: int, exc: Exception) -> None:
    _say(f"the connection dropped ({type(exc).__name__}); resuming (attempt {attempt + 2} of {ATTEMPTS})")
    time.sleep(min(2**attempt, 10))


def remote_stat(client: Client, iid: str, path: str, sha256: bool = False) -> dict[str, Any] | None:
    """What ``path`` is in the instance (``kind``, ``bytes``, ``sha256``), or None where nothing is."""
    import httpx

    try:
        resp = client.send("GET", f"/instances/{iid}/files/stat", params={"path": path, "sha256": sha256})
    except httpx.HTTPError as exc:
        fail(f"cannot reach the danlu server at {client.url} ({exc}); start it with `make run` or set DANLU_URL")
    if resp.status_code == 404 and _error_code(resp) == "file_not_found":
        return None
    if resp.status_code != 200:
        _refused(resp)
    data: dict[str, Any] = resp.json()
    return data


class _Sent:
    """Advances the progress bar once per byte, however often an attempt resends the same bytes."""

    def __init__(self, advance: Callable[[int], None]) -> None:
        self.advance, self.counted = advance, 0

    def at(self, position: int) -> None:
        if position > self.counted:
            self.advance(position - self.counted)
            self.counted = position


def _chunks(local: Path, start: int, sent: _Sent) -> Iterator[bytes]:
    with open(local, "rb") as f:
        f.seek(start)
        position = start
        while chunk := f.read(CHUNK):
            position += len(chunk)
            yield chunk
            sent.at(position)


def upload_file(client: Client, iid: str, local: Path, remote: str, advance: Callable[[int], None]) -> dict[str, Any]:
    import httpx

    size = local.stat().st_size
    there = remote_stat(client, iid, remote)  # what is there, and the workspace's free space (else ask the workspace)
    workspace = there if there is not None else remote_stat(client, iid, ".")
    free = workspace["free_bytes"] if workspace is not None else None
    if free is not None and size > free:  # before reading it whole for its checksum
        fail(f"{local} ({size / MiB:.1f} MiB) does not fit: {iid}'s workspace has {free / MiB:.1f} MiB free of its "
             "disk limit; remove files there first or rent more GPUs for more disk", "disk_limit")  # fmt: skip
    if remote.endswith("/") or (there is not None and there["kind"] == "folder"):
        remote = f"{remote.rstrip('/') or '/'}/{local.name}".replace("//", "/")
    with open(local, "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    params: dict[str, Any] = {"path": remote, "sha256": sha, "length": size}
    files, sent, resumed = f"/instances/{iid}/files/resumable", _Sent(advance), None
    for attempt in range(ATTEMPTS):
        try:
            resp = client.send("GET", files, params=params)
            if resp.status_code != 200:
                _refused(resp)
            received = int(resp.json()["received"])
            if resumed is None:
                resumed = received
                if received:
                    _say(f"resuming {iid}:{remote} at {received / MiB:.1f} of {size / MiB:.1f} MiB")
            sent.at(received)
            body = _chunks(local, received, sent)
            resp = client.send("PUT", files, params={**params, "offset": received}, content=body)
            if resp.status_code == 409 and _error_code(resp) == "upload_offset_mismatch":
                continue  # another attempt's bytes arrived meanwhile: ask again
            if resp.status_code != 200:
                _refused(resp)
            if resp.json()["done"]:
                return {"files": 1, "bytes": size, "to": f"{iid}:{remote}", "sha256_verified": True,
                        "resumed_from": resumed}  # fmt: skip
        except httpx.TransportError as exc:
            if attempt + 1 < ATTEMPTS:
                _pause(attempt, exc)
    fail(f"the upload of {local} did not finish after {ATTEMPTS} attempts; run the same command again to resume",
         "copy_interrupted")  # fmt: skip


def destination(remote: str, local: Path) -> Path:
    """Where a downloaded file lands here: inside ``local`` when it is a folder, else ``local`` itself."""
    return local / os.path.basename(remote.rstrip("/")) if local.is_dir() else local


def partial_waits(remote: str, local: Path) -> bool:
    """Whether a broken download of ``remote`` left its partial copy here."""
    dest = destination(remote, local)
    return dest.with_name(dest.name + PART_SUFFIX).exists()


def download_file(
    client: Client, iid: str, remote: str, size: int, local: Path, advance: Callable[[int], None]
) -> dict[str, Any]:
    import httpx

    dest = destination(remote, local)
    if not dest.parent.is_dir():
        fail(f"{dest.parent} is not a folder here", "invalid_copy")
    part = dest.with_name(dest.name + PART_SUFFIX)
    sent, resumed, digest = _Sent(advance), None, _Digest()
    # the instance's SHA-256, taken while the bytes come (a connection of its own), holds only if the file's
    # version is still the one read before that hash once the bytes are here: a write meanwhile means hash again
    theirs: dict[str, Any] = {}
    hashing = threading.Thread(target=_hash_there, args=(client, iid, remote, theirs), daemon=True)
    hashing.start()
    for attempt in range(ATTEMPTS):
        have = part.stat().st_size if part.exists() else 0
        if have > size:  # the file shrank since: start over
            part.unlink()
            have = 0
        if resumed is None:
            resumed = have
            if have:
                _say(f"resuming {dest} at {have / MiB:.1f} of {size / MiB:.1f} MiB")
        sent.at(have)
        if digest.bytes != have:  # a partial from an earlier run (or attempt): its bytes first
            digest = _Digest.of(part, have)
        try:
            if have < size:
                _fetch(client, iid, remote, part, have, sent, digest)
                continue  # check how much arrived
        except httpx.TransportError as exc:
            if attempt + 1 < ATTEMPTS:
                _pause(attempt, exc)
            continue
        hashing.join()
        early, now = theirs.get("stat"), remote_stat(client, iid, remote)
        held = early is not None and now is not None and early.get("version") and early["version"] == now["version"]
        final = early if held else remote_stat(client, iid, remote, sha256=True)
        ours = digest.h.hexdigest()
        if final is None or final["sha256"] != ours:
            part.unlink()
            fail(f"{iid}:{remote} changed while it was copied, or arrived corrupted (SHA-256 {ours} here, "
                 f"{final['sha256'] if final else 'gone'} there); the partial copy was removed: copy again",
                 "copy_corrupted")  # fmt: skip
        os.replace(part, dest)
        return {"files": 1, "bytes": size, "to": str(dest), "sha256_verified": True, "resumed_from": resumed}
    fail(f"the download of {iid}:{remote} did not finish after {ATTEMPTS} attempts; run the same command again to "
         "resume", "copy_interrupted")  # fmt: skip


def _hash_there(client: Client, iid: str, remote: str, out: dict[str, Any]) -> None:
    """The instance's stat and SHA-256 of the file into ``out["stat"]``; nothing there when they could not be
    taken (the caller then hashes after the bytes, as without this)."""
    import httpx

    try:
        resp = Client(client.url, client.token).send(
            "GET", f"/instances/{iid}/files/stat", params={"path": remote, "sha256": True}
        )
        if resp.status_code == 200:
            out["stat"] = resp.json()
    except httpx.HTTPError:
        pass


class _Digest:
    """The SHA-256 of what ``part`` holds, taken as it is written (the file is not read again at the end)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.h, self.bytes = hashlib.sha256(), 0

    @classmethod
    def of(cls, part: Path, length: int) -> _Digest:
        d = cls()
        if length:
            with open(part, "rb") as f:
                while chunk := f.read(min(CHUNK, length - d.bytes)):
                    d.add(chunk)
        return d

    def add(self, chunk: bytes) -> None:
        self.h.update(chunk)
        self.bytes += len(chunk)


def _fetch(client: Client, iid: str, remote: str, part: Path, have: int, sent: _Sent, digest: _Digest) -> None:
    """Append the file's bytes from ``have`` to ``part`` (an attempt: it may end early)."""
    headers = {"Range": f"bytes={have}-"} if have else {}
    with client.stream("GET", f"/instances/{iid}/files", params={"path": remote}, headers=headers) as resp:
        if resp.status_code == 416:  # the file is shorter than what is here: start over
            part.unlink(missing_ok=True)
            return
        if resp.status_code not in (200, 206):
            resp.read()
            _refused(resp)
        if resp.headers.get("x-danlu-kind") != "file":
            fail(f"{iid}:{remote} is no longer a file", "copy_failed")
        position = have if resp.status_code == 206 else 0
        if position != digest.bytes:  # the whole file came back: start the digest over
            digest.reset()
        with open(part, "ab" if position else "wb") as f:
            for chunk in resp.iter_bytes(CHUNK):
                f.write(chunk)
                digest.add(chunk)
                position += len(chunk)
                sent.at(position)
