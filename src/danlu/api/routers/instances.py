from __future__ import annotations

from fastapi import APIRouter, Request, Response

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.schemas import EventOut, InstanceOut, LogChunk, RentRequest
from danlu.compute import instances as svc
from danlu.compute import views
from danlu.core.clock import iso

router = APIRouter(prefix="/instances", tags=["instances"])


def _wake(request: Request) -> None:
    loop = getattr(request.app.state, "loop", None)
    if loop is not None:
        loop.wake()


@router.post("", response_model=InstanceOut, status_code=201)
def rent(body: RentRequest, p: PlatformDep, user: CurrentUser, request: Request) -> InstanceOut:
    view = svc.rent(
        p, user, body.gpu_model, body.gpu_count, body.command, body.name, body.interruptible, body.image, body.env
    )
    _wake(request)
    return InstanceOut.of(view)


@router.get("", response_model=list[InstanceOut])
async def list_instances(  # reads only: served on the event loop (see api/deps.py)
    p: PlatformDep, user: CurrentUser, all: bool = False
) -> list[InstanceOut]:
    return [InstanceOut.of(v) for v in views.list_instances(p, user, include_destroyed=all)]


@router.get("/{instance_id}", response_model=InstanceOut)
async def show(instance_id: str, p: PlatformDep, user: CurrentUser) -> InstanceOut:
    return InstanceOut.of(views.show(p, user, instance_id))


@router.post("/{instance_id}/stop", response_model=InstanceOut)
def stop(instance_id: str, p: PlatformDep, user: CurrentUser) -> InstanceOut:
    return InstanceOut.of(svc.stop(p, user, instance_id))


@router.post("/{instance_id}/start", response_model=InstanceOut)
def start(instance_id: str, p: PlatformDep, user: CurrentUser, request: Request) -> InstanceOut:
    view = svc.start(p, user, instance_id)
    _wake(request)
    return InstanceOut.of(view)


@router.delete("/{instance_id}", status_code=204)
def destroy(instance_id: str, p: PlatformDep, user: CurrentUser) -> Response:
    svc.destroy(p, user, instance_id)
    return Response(status_code=204)


@router.get("/{instance_id}/events", response_model=list[EventOut])
def events(instance_id: str, p: PlatformDep, user: CurrentUser) -> list[EventOut]:
    return [
        EventOut(from_status=e.from_status, to_status=e.to_status, reason=e.reason, at=iso(e.at_ms))
        for e in views.events(p, user, instance_id)
    ]


@router.get("/{instance_id}/logs", response_model=LogChunk)
def logs(instance_id: str, p: PlatformDep, user: CurrentUser, offset: int = 0) -> LogChunk:
    text, nxt = views.read_log(p, user, instance_id, offset)
    return LogChunk(text=text, next_offset=nxt)
