from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import (
    INSTANCE_ID,
    MAX_SECONDS,
    PRIORITY,
    Amount,
    Command,
    EnvVars,
    GpuCount,
    GpuModel,
    ImageName,
    JobIdPath,
    LogOffset,
    TeamName,
    errors,
    limited,
)
from danlu.api.schemas.instances import EventOut, LogChunk, RunLimitsIn
from danlu.compute.limits import resolve as resolve_limits
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import InvalidInput
from danlu.core.money import format_minor
from danlu.scheduling import jobs as svc

router = APIRouter(route_class=ListRoute, prefix="/jobs", tags=["jobs"], responses=errors(401, 403))
_ID = errors(404)
DEADLINE = (
    r"^[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[T ]([01][0-9]|2[0-3]):[0-5][0-9]"
    r"(:[0-5][0-9](\.[0-9]{1,6})?)?(Z|[+-]([01][0-9]|2[0-3]):?[0-5][0-9])$"
)
LATEST_DEADLINE = datetime(3000, 1, 1, tzinfo=UTC)


class JobIn(RunLimitsIn):
    command: Command
    gpus: GpuCount = 1
    gpus_max: GpuCount | None = Field(
        None,
        description="An elastic job: it may run at `gpus` to `gpus_max` GPUs, the scheduler's choice each run (it "
        "starts with what ends it soonest, grows into idle GPUs and gives GPUs back so waiting jobs start, each "
        "time with the preemption notice; the run sees its count in DANLU_GPUS). Never below `gpus`",
    )
    gpu_types: list[GpuModel] = Field(
        default_factory=list, max_length=16, description="Any of these models (at most 16; none: any priced model)"
    )
    max_price: Amount | None = Field(None, description="At most this price per GPU-hour")
    deadline: (
        Annotated[
            str,
            Field(pattern=DEADLINE),
            limited(
                "invalid_deadline",
                "deadline must be ISO-8601 with a timezone, before the year 3000, e.g. 2026-12-03T08:00:00+08:00",
                pattern=DEADLINE,
            ),
        ]
        | None
    ) = Field(
        None, description="A future ISO-8601 time with a timezone, before the year 3000, e.g. 2026-12-03T08:00:00+08:00"
    )
    est_duration_s: (
        Annotated[
            int,
            Field(ge=1, le=MAX_SECONDS),
            limited("invalid_duration", f"--est-duration is 1 to {MAX_SECONDS} seconds", lo=1, hi=MAX_SECONDS),
        ]
        | None
    ) = None
    interruptible: bool = False
    priority: Annotated[
        str,
        Field(pattern=f"^({PRIORITY})$"),
        limited("invalid_priority", f"--priority is one of {PRIORITY.replace('|', ', ')}", pattern=f"^({PRIORITY})$"),
    ] = "normal"
    image: ImageName = "host"
    env: EnvVars = Field(default_factory=dict)
    team: TeamName | None = Field(None, description="Pay from this team's account (member or above)")
    after: str | None = Field(
        None,
        max_length=32,
        description="Run only once this job (yours, or your team's that you may see) has succeeded; if it fails or "
        "is cancelled, this one is cancelled unrun (a pipeline: preprocess, then train, then evaluate)",
    )
    workspace: (
        Annotated[
            str,
            Field(pattern=INSTANCE_ID, max_length=32),
            limited("invalid_instance_id", "workspace is an instance id, i- and hex", pattern=INSTANCE_ID, text=32),
        ]
        | None
    ) = Field(
        None,
        description="Run in this rental's own workspace (yours; kept, not released), in place: what the job writes is "
        "there when the rental starts again. The job waits while the rental runs or another job is in it; the rental "
        "cannot start or be removed while the job may use it",
    )


class JobOut(BaseModel):
    id: str
    status: str
    status_reason: str
    command: list[str]
    gpus: int
    gpus_max: int | None = Field(None, description="An elastic job's largest count (`gpus` is its smallest)")
    gpus_now: int | None = Field(None, description="GPUs of its current or last run")
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
    queue_position: int | None = Field(
        None,
        description="While queued: its place among every queued job in arrival order (1 = first); the policy "
        "may start a later job first when it fits free GPUs this one cannot use",
    )
    queued_jobs: int | None = Field(None, description="While queued: how many jobs are queued on the platform")
    after: str | None = Field(None, description="The job this one runs after (`--after`)")
    waiting_for: str | None = Field(None, description="While queued: `after`, until it has succeeded")
    workspace_of: str | None = Field(None, description="The rental whose workspace it runs in (`--workspace`)")
    workspace_busy: bool = Field(
        False, description="While queued: its `workspace_of` rental runs, or another job is in that workspace"
    )

    @classmethod
    def of(cls, v: svc.JobView) -> JobOut:
        return cls(
            id=v.id,
            status=v.status,
            status_reason=v.status_reason,
            command=v.command,
            gpus=v.gpus,
            gpus_max=v.gpus_max,
            gpus_now=v.gpus_now,
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
            after=v.after,
            waiting_for=v.waiting_for,
            workspace_of=v.workspace_of,
            workspace_busy=v.workspace_busy,
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
    if when >= LATEST_DEADLINE:  # issue 8: year 9999 at -14:00 was saved and broke every listing
        raise InvalidInput("invalid_deadline", "the deadline must be before the year 3000 (UTC)")
    return int(when.timestamp() * 1000)


@router.post("", response_model=JobOut, status_code=201, responses=errors(400, 402, 404, 409, 429, 503))
def submit(body: JobIn, p: PlatformDep, user: CurrentUser, request: Request) -> JobOut:
    view = svc.submit(
        p,
        user,
        list(body.command),
        body.gpus,
        list(body.gpu_types),
        body.max_price,
        _deadline_ms(body.deadline),
        body.est_duration_s,
        body.interruptible,
        body.priority,
        body.image,
        body.env,
        team=body.team,
        limits=resolve_limits(p.settings, body.idle_stop, body.idle_threshold, body.max_duration, job=True),
        after=body.after,
        workspace_of=body.workspace,
        gpus_max=body.gpus_max,
    )
    loop = getattr(request.app.state, "loop", None)
    if loop is not None:
        loop.wake()
    return JobOut.of(view)


@router.get("", response_model=list[JobOut], **paged("submitted_at", "id"))
def list_jobs(p: PlatformDep, user: CurrentUser) -> list[JobOut]:
    return _placed(p, [JobOut.of(v) for v in svc.list_jobs(p, user)])


def _placed(p: Platform, jobs: list[JobOut]) -> list[JobOut]:
    """Each queued job with its queue position (one read of the queue for the whole list)."""
    if any(j.status == svc.QUEUED for j in jobs):
        positions, queued = svc.queue_positions(p)
        for j in jobs:
            if j.id in positions:
                j.queue_position, j.queued_jobs = positions[j.id], queued
    return jobs


@router.get("/{job_id}", response_model=JobOut, responses=_ID)
def show(job_id: JobIdPath, p: PlatformDep, user: CurrentUser) -> JobOut:
    return _placed(p, [JobOut.of(svc.show(p, user, job_id))])[0]


@router.post("/{job_id}/cancel", response_model=JobOut, responses=errors(404, 409))
def cancel(job_id: JobIdPath, p: PlatformDep, user: CurrentUser) -> JobOut:
    return JobOut.of(svc.cancel(p, user, job_id))


@router.get("/{job_id}/events", response_model=list[EventOut], responses=_ID)
def events(job_id: JobIdPath, p: PlatformDep, user: CurrentUser) -> list[EventOut]:
    return [
        EventOut(from_status=e.from_status, to_status=e.to_status, reason=e.reason, at=iso(e.at_ms))
        for e in svc.events(p, user, job_id)
    ]


@router.get("/{job_id}/logs", response_model=LogChunk, responses=_ID)
def logs(job_id: JobIdPath, p: PlatformDep, user: CurrentUser, offset: LogOffset = 0) -> LogChunk:
    text, nxt = svc.read_log(p, user, job_id, offset)
    return LogChunk(text=text, next_offset=nxt)
