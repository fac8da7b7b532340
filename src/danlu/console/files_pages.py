"""Files of a running instance in the console (issue 26, item 1): a folder's entries, download (a file; a folder as
a tar stream) and upload (a form, or files dropped on it), each through danlu.access.files as the API's
``/instances/{id}/files`` does: a command in the rental's sandbox as the renter's uid.

The upload form is read only after its declared size is held against the workspace's free space (a browser
always declares it): the server spools a form's files to its own disk while it parses them, so what it spools
is bounded by what the rental could take anyway."""

from __future__ import annotations

import posixpath
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from danlu.access import files
from danlu.access import service as access
from danlu.access.sessions import Registry
from danlu.accounts.credentials import csrf_ok
from danlu.api.routers.files import serve_download
from danlu.api.routers.instances import show as show_instance
from danlu.backend import Backend
from danlu.console.web import SECURITY_HEADERS, BadCsrf, ConsoleRoute, Page, back, page, with_flash
from danlu.core.errors import InvalidInput, NotFound

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
MAX_UPLOAD_FILES = 100
FolderQuery = Annotated[str, Query(min_length=1, max_length=files.MAX_PATH)]


def _checked_id(instance_id: str) -> str:
    if len(instance_id) > 32 or not instance_id.replace("-", "").isalnum():
        raise NotFound("instance_not_found", "there is no such instance here")
    return instance_id


def _joined(folder: str, name: str) -> str:
    return name if folder in (".", "") else posixpath.join(folder, name)


@router.get("/instances/{instance_id}/files")
def folder_page(ctx: Page, instance_id: str, request: Request, path: FolderQuery = ".") -> Response:
    """A folder of the instance: its entries, links to download each, and the upload form."""
    i = show_instance(_checked_id(instance_id), ctx.platform, ctx.me)
    with files.admitted(ctx.platform, ctx.me, i.id, request.app.state.sessions, request.app.state.transfers) as t:
        entries, more = files.listing(ctx.platform.backend, t, path)
    lead = "/" if path.startswith("/") else ""
    parts = [p for p in path.split("/") if p and p != "."]
    crumbs = [(name, lead + "/".join(parts[: n + 1])) for n, name in enumerate(parts)]
    parent = None if not parts else (lead + "/".join(parts[:-1])) or lead or "."
    free = files.free_bytes(ctx.platform, i.id)
    return ctx.render(
        "instance_files.html",
        i=i,
        folder=path,
        entries=[(e, _joined(path, e.name)) for e in entries],
        more=more,
        crumbs=crumbs,
        parent=parent,
        free=free,
    )


@router.get("/instances/{instance_id}/files/download")
async def download(instance_id: str, request: Request, path: FolderQuery = ".") -> Response:
    ctx = await page(request)  # a browser resuming a broken download sends a Range too
    return await serve_download(ctx.platform, ctx.me, _checked_id(instance_id), path, request, SECURITY_HEADERS)


@router.post("/instances/{instance_id}/files")
async def upload(instance_id: str, request: Request) -> Response:
    """The upload form: every file into the folder shown, each checked with SHA-256 before it replaces one."""
    ctx = await page(request)
    iid = _checked_id(instance_id)
    declared = request.headers.get("content-length", "")
    if not declared.isdigit():
        raise InvalidInput("invalid_upload", ctx._("The upload did not say its size; send it from the form."))
    await run_in_threadpool(show_instance, iid, ctx.platform, ctx.me)  # another tenant's: 404 before anything
    await run_in_threadpool(files.refuse_if_too_large, ctx.platform, iid, ctx._("the upload"), int(declared))
    form = await request.form(max_files=MAX_UPLOAD_FILES, max_fields=10)
    try:
        token = form.get("csrf")
        if ctx.session is None or not csrf_ok(ctx.session.csrf, token if isinstance(token, str) else None):
            raise BadCsrf()
        folder = form.get("path")
        folder = folder if isinstance(folder, str) and folder else "."
        files.check_path(folder)
        chosen = [f for f in form.getlist("files") if isinstance(f, UploadFile) and f.filename]
        if not chosen:
            raise InvalidInput("invalid_upload", ctx._("Choose one or more files to upload first."))
        registry: Registry = request.app.state.sessions
        t = await run_in_threadpool(files.open_target, ctx.platform, ctx.me, iid, registry, request.app.state.transfers)
        try:
            total = 0
            for f in chosen:
                name = posixpath.basename(f.filename.replace("\\", "/")) if f.filename else ""
                if name in ("", ".", ".."):
                    raise InvalidInput("invalid_path", ctx._("A file name cannot be empty, . or .."))
                out = await run_in_threadpool(_store, ctx.platform.backend, t, _joined(folder, name), f)
                total += int(str(out["bytes"]))
        finally:
            registry.leave(t.instance_id)
    finally:
        await form.close()
    said = ctx._("Uploaded %(n)s files (%(size)s), each checked with SHA-256.") % {
        "n": len(chosen),
        "size": ctx.fmt.mib(total),
    }
    return with_flash(back(f"/instances/{iid}/files", path=folder), "ok", said)


def _store(backend: Backend, t: access.Target, path: str, f: UploadFile) -> dict[str, object]:
    up = files.Upload(backend, t, path)
    try:
        while chunk := f.file.read(files.CHUNK):
            if not up.feed(chunk):
                break
    except BaseException:
        up.abandon()
        raise
    return up.finish()
