from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool

from danlu.api import hot
from danlu.api.deps import CurrentUser, PlatformDep, get_current_user
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import InstanceIdPath, LogOffset, errors
from danlu.api.schemas.instances import (
    EventOut,
    InstanceOut,
    LogChunk,
    RentRequest,
    ScheduleIn,
    ScheduleOut,
    StartRequest,
)
from danlu.api.schemas.teams import TeamQuery
from danlu.compute import holds, schedules, views
from danlu.compute import instances as svc
from danlu.compute.limits import resolve as resolve_limits
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import DanluError
from danlu.telemetry import efficiency

router = APIRouter(route_class=ListRoute, prefix="/instances", tags=["instances"], responses=errors(401))
_ID = errors(404)
RUN_STATUSES = (402, 403, 404, 409, 429, 503)  # balance, suspended, not found, state/capacity, quota, sandbox


def _wake(request: Request) -> None:
    loop = getattr(request.app.state, "loop", None)
    if loop is not None:
        loop.wake()


@router.post("", response_model=InstanceOut, status_code=201, responses=errors(400, *RUN_STATUSES))
def rent(body: RentRequest, p: PlatformDep, user: CurrentUser, request: Request) -> InstanceOut:
    """Rent GPUs now. With ``package``: buy that package or reserved commitment of exactly these
    GPUs (paid at once) and run on it; a rental without one still runs on an idle package or
    reservation its account already holds for the model."""
    args: dict[str, Any] = {"name": body.name, "interruptible": body.interruptible}
    args.update(image=body.image, env=body.env, team=body.team)
    args["limits"] = resolve_limits(p.settings, body.idle_stop, body.idle_threshold, body.max_duration)
    if body.package is not None:
        args.update(from_instance=body.from_instance, from_snapshot=body.from_snapshot)
        view = holds.rent_on_new_hold(
            p,
            user,
            body.package,
            body.on_expiry,
            body.gpu_model,
            body.gpu_count,
            list(body.command),
            body.expected_price,
            **args,
        )
    else:
        view = svc.rent(
            p,
            user,
            body.gpu_model,
            body.gpu_count,
            list(body.command),
            from_instance=body.from_instance,
            from_snapshot=body.from_snapshot,
            **args,
        )
    _wake(request)
    return InstanceOut.of(view)


LISTING = TypeAdapter(list[InstanceOut])


@router.get("", response_model=list[InstanceOut], **paged("created_at", "id"))
async def list_instances(  # a memo hit on the event loop, a miss in the thread pool
    p: PlatformDep, user: CurrentUser, all: bool = False, team: TeamQuery = None
) -> Response:
    """Your instances, or with ``team`` every instance that team pays for (any member may look). The JSON
    bytes of your own listing are rendered again only when it would change (views.render_listing)."""
    if team is not None:
        shown = await run_in_threadpool(views.list_team_instances, p, user, team, all)
        return Response(LISTING.dump_json([InstanceOut.of(v) for v in shown]), media_type="application/json")
    body = await hot.once(hot.listing_memo(p, user.id, all), lambda: _listing_json(p, user, all))
    return Response(body, media_type="application/json")


def _listing_json(p: Platform, user: CurrentUser, include_destroyed: bool) -> bytes:
    return views.render_listing(
        p, user, include_destroyed, lambda vs: LISTING.dump_json([InstanceOut.of(v) for v in vs]), "json"
    )


SSE = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
RECHECK_S = 15.0  # an open stream's credentials are checked again this often (as open sessions are)


async def _while_allowed(request: Request, ticks: AsyncIterator[str]) -> AsyncIterator[str]:
    """``ticks`` while the client is connected and its token still signs it in (checked every
    :data:`RECHECK_S`: a revoked or rotated token, a suspension end the stream), and while it may
    still read what it streams (a member removed from the team). Either way the stream ends with one
    ``event: error`` whose data is the error a new request would get, not with a traceback."""
    loop = asyncio.get_running_loop()
    checked = loop.time()
    try:
        async for chunk in ticks:
            if await request.is_disconnected():
                return
            if loop.time() - checked >= RECHECK_S:
                await get_current_user(request)
                checked = loop.time()
            if chunk:
                yield chunk
    except DanluError as exc:
        yield f"event: error\ndata: {json.dumps({'error': exc.to_dict()})}\n\n"


STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}
}


# Not /instances/stream: that path would also match /instances/{instance_id}'s other methods.
stream_router = APIRouter(prefix="/stream", tags=["instances"], responses=errors(401))


@stream_router.get("/instances", response_class=StreamingResponse, responses=STREAM_DOC)
async def stream(p: PlatformDep, user: CurrentUser, request: Request) -> StreamingResponse:
    """Server-sent events: your instances (as ``GET /instances`` answers them, with live cost) when
    they change, checked every second; a comment every 15 s keeps the connection open. Reads run
    in the thread pool, not on the event loop."""

    async def events() -> AsyncIterator[str]:
        last, quiet = b"", 0
        while True:
            body = await run_in_threadpool(_listing_json, p, user, False)
            if body != last:
                last, quiet = body, 0
                yield f"data: {body.decode()}\n\n"
            else:
                quiet += 1
                # "": a tick with nothing to send, so the rights are still checked on time
                yield ": keep-alive\n\n" if quiet % 15 == 0 else ""
            await asyncio.sleep(1.0)

    return StreamingResponse(_while_allowed(request, events()), media_type="text/event-stream", headers=SSE)


@router.get("/{instance_id}/logs/stream", response_class=StreamingResponse, responses={**STREAM_DOC, **_ID})
async def stream_logs(
    instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser, request: Request, offset: LogOffset = 0
) -> StreamingResponse:
    """Server-sent events: the log from ``offset`` as it grows (``{"text", "next_offset"}``), checked
    twice a second, until you disconnect."""
    await run_in_threadpool(views.read_log, p, user, instance_id, offset)  # 404 before the stream starts

    async def events() -> AsyncIterator[str]:
        at, quiet = offset, 0
        while True:
            text, at = await run_in_threadpool(views.read_log, p, user, instance_id, at)
            if text:
                quiet = 0
                yield "data: " + LogChunk(text=text, next_offset=at).model_dump_json() + "\n\n"
            else:
                quiet += 1
                yield ": keep-alive\n\n" if quiet % 30 == 0 else ""
            await asyncio.sleep(0.5)

    return StreamingResponse(_while_allowed(request, events()), media_type="text/event-stream", headers=SSE)


@router.get("/{instance_id}", response_model=InstanceOut, responses=_ID)
def show(instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser) -> InstanceOut:
    out = InstanceOut.of(views.show(p, user, instance_id))
    sched = schedules.schedule_of(p, instance_id)
    out.schedule = ScheduleOut.of(sched) if sched is not None else None
    out.hints = efficiency.hints_for(p, instance_id)
    return out


@router.put("/{instance_id}/schedule", response_model=ScheduleOut, responses=errors(400, 404, 422))
def set_schedule(instance_id: InstanceIdPath, body: ScheduleIn, p: PlatformDep, user: CurrentUser) -> ScheduleOut:
    """Stop and/or start this instance at a time of day (the deployment's zone) on some weekdays,
    e.g. ``{"stop": "23:00", "start": "08:00", "days": ["mon-fri"]}``; replaces any schedule. A stop is
    a policy stop (the preemption notice); a start that fails (no free GPU, no money) is a
    ``schedule_failed`` event in `danlu events` and your webhooks."""
    return ScheduleOut.of(schedules.set_schedule(p, user, instance_id, body.stop, body.start, ",".join(body.days)))


@router.delete("/{instance_id}/schedule", status_code=204, responses=errors(404))
def clear_schedule(instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser) -> Response:
    schedules.clear_schedule(p, user, instance_id)
    return Response(status_code=204)


@router.post("/{instance_id}/stop", response_model=InstanceOut, responses=errors(404, 409, 503))
def stop(instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser) -> InstanceOut:
    return InstanceOut.of(svc.stop(p, user, instance_id))


@router.post("/{instance_id}/start", response_model=InstanceOut, responses=errors(400, *RUN_STATUSES))
def start(
    instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser, request: Request, body: StartRequest | None = None
) -> InstanceOut:
    """Start a stopped instance with its workspace; with a body, on another GPU model or count (a new
    allocation at that shape's price: `expected_price` guards it)."""
    body = body or StartRequest()
    view = svc.start(p, user, instance_id, body.gpu_model, body.gpu_count, body.expected_price)
    _wake(request)
    return InstanceOut.of(view)


@router.delete("/{instance_id}", status_code=204, responses=errors(404, 409))
def destroy(instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser) -> Response:
    svc.destroy(p, user, instance_id)
    return Response(status_code=204)


@router.get("/{instance_id}/events", response_model=list[EventOut], responses=_ID)
def events(instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser) -> list[EventOut]:
    return [
        EventOut(from_status=e.from_status, to_status=e.to_status, reason=e.reason, at=iso(e.at_ms))
        for e in views.events(p, user, instance_id)
    ]


@router.get("/{instance_id}/logs", response_model=LogChunk, responses=_ID)
def logs(instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser, offset: LogOffset = 0) -> LogChunk:
    text, nxt = views.read_log(p, user, instance_id, offset)
    return LogChunk(text=text, next_offset=nxt)
