from __future__ import annotations

from fastapi import APIRouter, Response

from danlu.api.deps import AdminUser, CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import ImageNamePath, errors
from danlu.api.schemas.operator import ImageContents, ImageIn, ImageOut
from danlu.compute import images as svc
from danlu.core.clock import iso

router = APIRouter(route_class=ListRoute, tags=["images"], responses=errors(401))


def _out(v: svc.ImageView) -> ImageOut:
    return ImageOut(
        name=v.name,
        kind=v.kind,
        description=v.description,
        size_bytes=v.size_bytes,
        created_at=iso(v.created_at_ms),
        contents=ImageContents.model_validate(v.contents) if v.contents is not None else None,
    )


@router.get("/images", response_model=list[ImageOut], **paged("name"))
def list_images(p: PlatformDep, _user: CurrentUser) -> list[ImageOut]:
    """The root filesystems a rental can run in (``image`` of a rental or job)."""
    return [_out(v) for v in svc.list_images(p)]


@router.post("/admin/images", response_model=ImageOut, status_code=201, responses=errors(400, 403, 409))
def register(body: ImageIn, p: PlatformDep, _admin: AdminUser) -> ImageOut:
    """Import a root filesystem (a folder or a tarball on the server's host) as an image."""
    return _out(svc.register(p, body.name, body.source, body.description))


@router.delete("/admin/images/{name}", status_code=204, responses=errors(403, 404, 409))
def remove(name: ImageNamePath, p: PlatformDep, _admin: AdminUser) -> Response:
    svc.remove(p, name)
    return Response(status_code=204)
