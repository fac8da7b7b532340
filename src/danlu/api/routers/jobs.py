from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.schemas import EventOut, LogChunk, Strict
from danlu.core.clock import iso
from danlu.core.errors import InvalidInput
from danlu.core.money import format_minor
from danlu.scheduling import jobs as svc

router = APIRouter(prefix="/jobs", tags=["jobs"])


class JobIn(Strict):
    command: list[str]
    gpus: int = 1
    gpu_types: list[str] = Field(default_factory=list)
    max_price: str | None = None
    deadline: str | None = Field(None, description="ISO-8601 time with a timezone, e.g. 2026-12-03T08:00:00+08:00")
    est_duration_s: int | None = None
    interruptible: bool = False
    priority: str = "normal"
    image: str = Field("host", max_length=64)
    env: dict[str, str] = Field(default_factory=dict)


class JobOut(BaseModel):
    id: str
    status: str
    status_reason: str
    command: list[str]
    gpus: int
    gpu_types: list[str]
    gpu_model: str | None
    interruptible: bool
    priority: str
    attempts: int
    preemptions: int
    exit_code: int | None
    cost: str
    currency: str
    submitted_at: str | None
    started_at: str | None
    ended_at: str | None
    deadline: str | None

    @classmethod
    def of(cls, v: svc.JobView) -> JobOut:
        return cls(
            id=v.id,
            status=v.status,
            status_reason=v.status_reason,
            command=v.command,
            gpus=v.gpus,
            gpu_types=v.gpu_types,
            gpu_model=v.gpu_model,
            interruptible=v.interruptible,
            priority=v.priority,
            attempts=v.attempts,
            preemptions=v.preemptions,
            exit_code=v.exit_code,
            cost=format_minor(v.cost_minor, v.currency),
            currency=v.currency,
            submitted_at=iso(v.submit_ms),
            started_at=iso(v.first_start_ms),
            ended_at=iso(v.end_ms),
            deadline=iso(v.deadline_ms),
        )


def _deadline_ms(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput("invalid_deadline", "deadline must be ISO-8601, e.g. 2026-12-03T08:00:00+08:00") from None
    if when.tzinfo is None:
        raise InvalidInput("invalid_deadline", "give the deadline's timezone, e.g. +08:00 or Z")
    return int(when.timestamp() * 1000)


@router.post("", response_model=JobOut, status_code=201)
def submit(body: JobIn, p: PlatformDep, user: CurrentUser, request: Request) -> JobOut:
    view = svc.submit(
        p,
        user,
        body.command,
        body.gpus,
        body.gpu_types,
        body.max_price,
        _deadline_ms(body.deadline),
        body.est_duration_s,
        body.interruptible,
        body.priority,
        body.image,
        body.env,
    )
    loop = getattr(request.app.state, "loop", None)
    if loop is not None:
        loop.wake()
    return JobOut.of(view)


@router.get("", response_model=list[JobOut])
def list_jobs(p: PlatformDep, user: CurrentUser) -> list[JobOut]:
    return [JobOut.of(v) for v in svc.list_jobs(p, user)]


@router.get("/{job_id}", response_model=JobOut)
def show(job_id: str, p: PlatformDep, user: CurrentUser) -> JobOut:
    return JobOut.of(svc.show(p, user, job_id))


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: str, p: PlatformDep, user: CurrentUser) -> JobOut:
    return JobOut.of(svc.cancel(p, user, job_id))


@router.get("/{job_id}/events", response_model=list[EventOut])
def events(job_id: str, p: PlatformDep, user: CurrentUser) -> list[EventOut]:
    return [
        EventOut(from_status=e.from_status, to_status=e.to_status, reason=e.reason, at=iso(e.at_ms))
        for e in svc.events(p, user, job_id)
    ]


@router.get("/{job_id}/logs", response_model=LogChunk)
def logs(job_id: str, p: PlatformDep, user: CurrentUser, offset: int = 0) -> LogChunk:
    text, nxt = svc.read_log(p, user, job_id, offset)
    return LogChunk(text=text, next_offset=nxt)
