"""Live updates for the console as server-sent events (``text/event-stream``; EventSource in the
browser reconnects by itself):

- ``/live/instances``: once a second, every instance's status and cost so far (the same live cost
  as ``danlu ps``), formatted for the page's language; a row's status change also carries its reason;
- ``/live/instances/{id}/logs`` and ``/live/jobs/{id}/logs``: the log as it grows (from an offset).

Each stream checks the session when it opens and again every minute, and ends when the session
does. Database reads run in the thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from danlu.api.schemas.instances import InstanceOut
from danlu.compute import views
from danlu.console.web import ConsoleRoute, Ctx, Page, page
from danlu.core.errors import DanluError
from danlu.scheduling import jobs as jobs_svc

router = APIRouter(prefix="/live", route_class=ConsoleRoute, include_in_schema=False)
TICK_S = 1.0
LOG_TICK_S = 0.5
RECHECK_S = 60.0
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _event(data: object, name: str | None = None) -> str:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def _until_gone(request: Request, ticks: Callable[[], AsyncIterator[str]]) -> AsyncIterator[str]:
    """Runs ``ticks`` while the browser is connected and the session is live (checked each minute)."""
    loop = asyncio.get_running_loop()
    checked = loop.time()
    try:
        async for chunk in ticks():
            if await request.is_disconnected():
                return
            if loop.time() - checked > RECHECK_S:
                try:
                    await page(request)
                except Exception:
                    yield _event({"signed_out": True}, "end")
                    return
                checked = loop.time()
            yield chunk
    except DanluError:  # no longer theirs to read (a member removed from the team): ended, not a traceback
        yield _event({"gone": True}, "end")


def _instances_snapshot(ctx: Ctx) -> list[dict[str, str]]:
    out = []
    for v in views.list_instances(ctx.platform, ctx.me):
        o = InstanceOut.of(v)
        out.append(
            {
                "id": o.id,
                "status": o.status,
                "status_text": ctx._(o.status),
                "reason": ctx.said(o.status_reason),
                "cost": ctx.fmt.money(o.cost, o.currency),
                "billed": ctx.fmt.duration(o.billed_seconds),
            }
        )
    return out


@router.get("/instances")
def instances(ctx: Page) -> StreamingResponse:
    async def ticks() -> AsyncIterator[str]:
        while True:
            yield _event(await run_in_threadpool(_instances_snapshot, ctx))
            await asyncio.sleep(TICK_S)

    return StreamingResponse(_until_gone(ctx.request, ticks), media_type="text/event-stream", headers=HEADERS)


def _log_stream(ctx: Ctx, read: Callable[[int], tuple[str, int]], offset: int) -> StreamingResponse:
    read(offset)  # raises 404 (another's, or none) before the stream starts

    async def ticks() -> AsyncIterator[str]:
        at = offset
        while True:
            text, at = await run_in_threadpool(read, at)
            yield _event({"text": text, "next_offset": at}) if text else ": keep-alive\n\n"
            await asyncio.sleep(LOG_TICK_S)

    return StreamingResponse(_until_gone(ctx.request, ticks), media_type="text/event-stream", headers=HEADERS)


Offset = Annotated[int, Query(ge=0, le=2**53)]


@router.get("/instances/{instance_id}/logs")
def instance_logs(ctx: Page, instance_id: str, offset: Offset = 0) -> StreamingResponse:
    return _log_stream(ctx, lambda at: views.read_log(ctx.platform, ctx.me, instance_id[:32], at), offset)


@router.get("/jobs/{job_id}/logs")
def job_logs(ctx: Page, job_id: str, offset: Offset = 0) -> StreamingResponse:
    return _log_stream(ctx, lambda at: jobs_svc.read_log(ctx.platform, ctx.me, job_id[:32], at), offset)
