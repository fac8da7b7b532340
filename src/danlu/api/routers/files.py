"""Files in and out of a running instance over HTTP (issue 26, item 1; danlu.access.files, docs/access.md
"Files"): download a file or a folder (as tar), upload a file, list a folder. Each is a command in the
rental's sandbox as the renter's uid; the caller needs the right to open a session into it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from danlu.access import files
from danlu.access.sessions import Registry
from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import InstanceIdPath, errors
from danlu.context import Platform
from danlu.core.errors import InvalidInput, RangeNotSatisfiable

router = APIRouter(tags=["files"], responses=errors(401))
list_router = APIRouter(route_class=ListRoute, tags=["files"], responses=errors(401))

PathQuery = Annotated[
    str,
    Query(
        min_length=1,
        max_length=files.MAX_PATH,
        description="A path in the instance; a relative one is under its workspace (/workspace), e.g. data/a.csv",
    ),
]
SHA256 = r"^[0-9a-fA-F]{64}$"


class FileOut(BaseModel):
    path: str
    bytes: int = Field(description="bytes written")
    sha256: str = Field(description="SHA-256 of what was written, checked in the instance against what arrived")


class EntryOut(BaseModel):
    name: str
    kind: str = Field(description="file, folder, link or other")
    bytes: int
    modified_s: int = Field(description="modification time, seconds since 1970")


DOWNLOAD_DOC: dict[int | str, dict[str, object]] = {
    200: {
        "content": {"application/octet-stream": {}, "application/x-tar": {}},
        "description": "the file's bytes, or the folder as a tar stream (X-Danlu-Kind: file or folder)",
    },
    206: {
        "content": {"application/octet-stream": {}},
        "description": "the byte range a `Range: bytes=START-` or `bytes=START-END` header asked for (a file only)",
    },
    **errors(400, 404, 409, 416),
}


@router.get("/instances/{instance_id}/files", response_class=StreamingResponse, responses=DOWNLOAD_DOC)
async def download(
    instance_id: InstanceIdPath, path: PathQuery, p: PlatformDep, user: CurrentUser, request: Request
) -> Response:
    """Download a file of a running instance, or a folder as a tar stream, read in the sandbox as you."""
    return await serve_download(p, user, instance_id, path, request, {"Cache-Control": "no-store"})


async def serve_download(
    p: Platform, user: CurrentUser, instance_id: str, path: str, request: Request, headers: dict[str, str]
) -> Response:
    """A download for the API and the console alike: the file (from its ``Range``, if any) or the folder."""
    registry: Registry = request.app.state.sessions
    t = await run_in_threadpool(files.open_target, p, user, instance_id, registry, request.app.state.transfers)
    try:
        wanted = files.parse_range(request.headers.get("range"))
        d = await run_in_threadpool(files.download, p.backend, t, path, *(wanted or (0, None)))
    except BaseException:
        registry.leave(t.instance_id)
        raise
    return _response(d, registry, t.instance_id, headers, wanted)


def _response(
    d: files.Download,
    registry: Registry,
    instance_id: str,
    headers: dict[str, str],
    wanted: tuple[int, int | None] | None,
) -> Response:
    """The download as it is read; after the response, sent or abandoned by its client (whose response may
    never iterate), the command ends and the instance's session count drops, once. A file says its length and
    takes a byte range (``wanted``, from ``Range``: 206, or 416 past its end), so a broken download resumes
    (``curl -C -``, a browser's resume)."""
    left: list[bool] = []

    def done() -> None:
        d.close()
        if not left:
            left.append(True)
            registry.leave(instance_id)

    media = "application/x-tar" if d.kind == "folder" else "application/octet-stream"
    headers = headers | {"Content-Disposition": disposition(d.name), "X-Danlu-Kind": d.kind}
    status = 200
    if d.kind == "file" and d.size is not None:
        headers["Accept-Ranges"] = "bytes"
        start, length = wanted or (0, None)
        if wanted is not None and start >= d.size:
            done()
            raise RangeNotSatisfiable(
                "range_not_satisfiable",
                f"the range starts at byte {start}, past the end of {d.name} ({d.size} bytes); ask for less",
                size=d.size,
            )
        end = d.size - 1 if length is None else min(d.size - 1, start + length - 1)
        headers["Content-Length"] = str(end - start + 1)
        if wanted is not None:
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{d.size}"
    return StreamingResponse(
        d.chunks, status_code=status, media_type=media, headers=headers, background=BackgroundTask(done)
    )


def disposition(name: str) -> str:
    """``attachment`` with the name in ASCII (others as _) and in full (RFC 6266 ``filename*``)."""
    from urllib.parse import quote

    ascii_name = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name) or "download"
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"


UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        "description": "the file's bytes",
    }
}


@router.put(
    "/instances/{instance_id}/files",
    response_model=FileOut,
    responses=errors(400, 404, 409),
    openapi_extra=UPLOAD_BODY,
)
async def upload(
    instance_id: InstanceIdPath,
    path: PathQuery,
    p: PlatformDep,
    user: CurrentUser,
    request: Request,
    x_content_sha256: Annotated[
        str | None, Header(pattern=SHA256, description="The file's SHA-256: checked before it replaces anything")
    ] = None,
) -> FileOut:
    """Upload a file into a running instance (written as you; folders on the way are made). It is written
    under a temporary name, checked (SHA-256 here and in the instance, and against ``X-Content-SHA256`` when
    sent) and only then renamed into place. A size over the workspace's free space is refused at once
    (``409 disk_limit``); so is a write the disk limit stops."""
    files.check_path(path)
    declared = request.headers.get("content-length", "")
    content_length = int(declared) if declared.isdigit() else None  # none: chunked, the disk limit stops it
    registry: Registry = request.app.state.sessions
    t = await run_in_threadpool(files.open_target, p, user, instance_id, registry, request.app.state.transfers)
    try:
        await run_in_threadpool(files.refuse_if_too_large, p, t.instance_id, path, content_length)
        up = await run_in_threadpool(files.Upload, p.backend, t, path)
        try:
            async for chunk in request.stream():
                if not await run_in_threadpool(up.feed, chunk):
                    break  # it stopped reading (disk full): finish says why
        except BaseException:
            await run_in_threadpool(up.abandon)
            raise
        return FileOut.model_validate(await run_in_threadpool(up.finish, x_content_sha256))
    finally:
        registry.leave(t.instance_id)


class StatOut(BaseModel):
    path: str
    kind: str = Field(description="file, folder, link or other (as the instance sees it: a link is followed)")
    bytes: int = Field(description="a file's size; 0 for the others")
    sha256: str | None = Field(description="a file's SHA-256 when asked for (sha256=true), else null")
    version: str | None = Field(
        None,
        description="a file's version (modified and changed times, inode), read before its SHA-256: any write "
        "changes it, so the same version later means the SHA-256 still holds; null for the others",
    )
    free_bytes: int | None = Field(description="what the workspace can still take (its disk limit); null: no limit")


@router.get("/instances/{instance_id}/files/stat", response_model=StatOut, responses=errors(400, 404, 409))
def file_stat(
    instance_id: InstanceIdPath,
    path: PathQuery,
    p: PlatformDep,
    user: CurrentUser,
    request: Request,
    sha256: Annotated[bool, Query(description="also read the file whole for its SHA-256")] = False,
) -> StatOut:
    """What a path is in the instance (running or stopped), as you see it: kind, size, a file's SHA-256; and the
    workspace's free space."""
    with files.admitted(p, user, instance_id, request.app.state.sessions, request.app.state.transfers) as t:
        st = files.stat(p.backend, t, path, sha256)
    free = files.free_bytes(p, t.instance_id)
    return StatOut(path=st.path, kind=st.kind, bytes=st.bytes, sha256=st.sha256, version=st.version, free_bytes=free)


class UploadStateOut(BaseModel):
    path: str
    sha256: str = Field(description="the whole file's SHA-256, as declared")
    length: int = Field(description="the whole file's size, as declared")
    received: int = Field(description="bytes that have arrived: send the rest from here (offset)")
    done: bool = Field(description="all arrived, checked and renamed into place")


Sha256Query = Annotated[str, Query(pattern=SHA256, description="the whole file's SHA-256 (names the upload)")]
LengthQuery = Annotated[int, Query(ge=0, le=1 << 50, description="the whole file's size in bytes")]


@router.get("/instances/{instance_id}/files/resumable", response_model=UploadStateOut, responses=errors(400, 404, 409))
def resumable_state(
    instance_id: InstanceIdPath,
    path: PathQuery,
    sha256: Sha256Query,
    length: LengthQuery,
    p: PlatformDep,
    user: CurrentUser,
    request: Request,
) -> UploadStateOut:
    """How much of a resumable upload (this path, this whole-file SHA-256) has arrived: send from there."""
    with files.admitted(p, user, instance_id, request.app.state.sessions, request.app.state.transfers) as t:
        st = files.upload_state(p.backend, t, path, sha256, length)
    return UploadStateOut(**vars(st))


@router.put(
    "/instances/{instance_id}/files/resumable",
    response_model=UploadStateOut,
    responses=errors(400, 404, 409),
    openapi_extra=UPLOAD_BODY | {"description": "the file's bytes from `offset` on (all or some of them)"},
)
async def resumable_upload(
    instance_id: InstanceIdPath,
    path: PathQuery,
    sha256: Sha256Query,
    length: LengthQuery,
    p: PlatformDep,
    user: CurrentUser,
    request: Request,
    offset: Annotated[int, Query(ge=0, le=1 << 50, description="where these bytes start: the `received` so far")] = 0,
) -> UploadStateOut:
    """Send the rest of a large file from ``offset`` (exactly what has arrived, else ``409
    upload_offset_mismatch``); a dropped connection keeps what arrived. Once all ``length`` bytes are there,
    their SHA-256 is taken in the instance and a match is renamed into place (``done``); a mismatch removes
    the partial upload (``422 checksum_mismatch``). What is left to send is refused at once when it cannot fit
    (``409 disk_limit``). Running or stopped instances, as any file request."""
    files.check_path(path)
    if offset > length:
        raise InvalidInput("invalid_offset", f"offset {offset} is past the declared length {length}")
    registry: Registry = request.app.state.sessions
    t = await run_in_threadpool(files.open_target, p, user, instance_id, registry, request.app.state.transfers)
    try:
        await run_in_threadpool(files.refuse_if_too_large, p, t.instance_id, path, length - offset)
        up = await run_in_threadpool(files.PartUpload, p.backend, t, path, sha256, length, offset)
        try:
            async for chunk in request.stream():
                if chunk and not await run_in_threadpool(up.feed, chunk):
                    break  # it stopped reading: finish says why
        except BaseException:
            await run_in_threadpool(up.abandon)
            raise
        return UploadStateOut(**vars(await run_in_threadpool(up.finish)))
    finally:
        registry.leave(t.instance_id)


@list_router.get(
    "/instances/{instance_id}/entries", response_model=list[EntryOut], **paged("name"), responses=errors(400, 404, 409)
)
def entries(
    instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser, request: Request, path: PathQuery = "."
) -> list[EntryOut]:
    """The entries of a folder of a running instance (as you see it), by name; at most 2,000."""
    with files.admitted(p, user, instance_id, request.app.state.sessions, request.app.state.transfers) as t:
        found, _ = files.listing(p.backend, t, path)
    return [EntryOut(name=e.name, kind=e.kind, bytes=e.bytes, modified_s=e.modified_s) for e in found]
