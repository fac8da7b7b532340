"""Renting and running: offers, rent requests and their limits, schedules, instances, events and logs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from danlu.api.schemas.common import (
    INSTANCE_ID,
    NO_CONTROL,
    Amount,
    Command,
    EnvVars,
    GpuCount,
    GpuModel,
    IdleStop,
    IdleThreshold,
    ImageName,
    OnExpiry,
    RunDuration,
    Strict,
    TeamName,
    TermName,
    limited,
)
from danlu.compute.hosts import cpus_text
from danlu.compute.lifecycle import StopCause
from danlu.compute.offers import Offer
from danlu.compute.schedules import ScheduleView
from danlu.compute.views import InstanceView
from danlu.core.clock import iso
from danlu.core.money import format_minor


class RunLimitsIn(Strict):
    """A run's own limits (docs/telemetry.md); the operator's default and maximum apply."""

    idle_stop: IdleStop | None = None
    idle_threshold: IdleThreshold | None = None
    max_duration: RunDuration | None = None


class RentRequest(RunLimitsIn):
    gpu_model: GpuModel
    gpu_count: GpuCount = 1
    command: Command
    name: Annotated[
        str,
        Field(max_length=64, pattern=NO_CONTROL),
        limited("invalid_name", "instance names are at most 64 characters, without control characters", text=64),
    ] = ""
    interruptible: bool = False
    image: ImageName = "host"
    env: EnvVars = Field(default_factory=dict)
    team: TeamName | None = Field(None, description="Pay from this team's account (member or above)")
    package: TermName | None = Field(
        None, description="Buy this package or reserved commitment with the rental (paid at once) and run on it"
    )
    on_expiry: OnExpiry = "stop"
    expected_price: Amount | None = Field(
        None, description="With package: the price you were quoted (POST /plans/quote); if it changed, 409"
    )
    from_instance: (
        Annotated[
            str,
            Field(pattern=INSTANCE_ID, max_length=32),
            limited("invalid_instance_id", "from_instance is an instance id, i- and hex", pattern=INSTANCE_ID, text=32),
        ]
        | None
    ) = Field(
        None,
        description="Start with a copy of this stopped rental's workspace (your own); copied before any GPU is "
        "claimed, so not billed",
    )
    from_snapshot: (
        Annotated[
            str,
            Field(pattern=r"^s-[0-9a-f]{1,30}$", max_length=32),
            limited("invalid_snapshot_id", "from_snapshot is a snapshot id, s- and hex", pattern=r"^s-[0-9a-f]{1,30}$"),
        ]
        | None
    ) = Field(None, description="Start with this snapshot of a workspace (yours; `GET /snapshots`), restored unbilled")


class StartRequest(BaseModel):
    """Resize on start (issue 26): leave both out to start as it was."""

    gpu_model: GpuModel | None = Field(
        None, description="Start on this GPU model instead (the workspace moves with it)"
    )
    gpu_count: GpuCount | None = Field(None, description="Start on this many GPUs instead")
    expected_price: Amount | None = Field(
        None,
        description="The hourly price of the new shape (all its GPUs, before discounts) you were shown; if it "
        "changed, 409 price_changed and nothing starts",
    )


class OfferOut(BaseModel):
    gpu_model: str
    vram_gb: int
    free: int
    total: int
    max_per_host: int
    price_per_hour: str | None
    interruptible_price_per_hour: str | None
    currency: str
    simulated: bool
    vcpus_per_gpu: str | None
    memory_per_gpu_mb: int | None
    disk_per_gpu_mb: int | None
    sandbox: str
    price_now: str | None = Field(None, description="the on-demand price in force now under the operator's tariffs")
    tariff_now: str | None = Field(None, description="the tariff window in force now, if any")
    next_cheaper_at: str | None = Field(None, description="when the next cheaper window opens (ISO 8601, UTC)")
    next_cheaper_price: str | None = None

    @classmethod
    def of(cls, o: Offer) -> OfferOut:
        price = None if o.price_per_hour_minor is None else format_minor(o.price_per_hour_minor, o.currency)
        spot = o.interruptible_price_per_hour_minor
        spot_text = None if spot is None else format_minor(spot, o.currency)
        return cls(
            gpu_model=o.gpu_model,
            vram_gb=o.vram_gb,
            free=o.free,
            total=o.total,
            max_per_host=o.max_per_host,
            price_per_hour=price,
            interruptible_price_per_hour=spot_text,
            currency=o.currency,
            simulated=o.simulated,
            vcpus_per_gpu=cpus_text(o.cpus_per_gpu_milli) if o.cpus_per_gpu_milli else None,
            memory_per_gpu_mb=o.mem_per_gpu_mb,
            disk_per_gpu_mb=o.disk_per_gpu_mb,
            sandbox=o.sandbox,
            price_now=None if o.price_now_minor is None else format_minor(o.price_now_minor, o.currency),
            tariff_now=o.tariff_now,
            next_cheaper_at=None if o.next_cheaper_at_ms is None else iso(o.next_cheaper_at_ms),
            next_cheaper_price=None
            if o.next_cheaper_price_minor is None
            else format_minor(o.next_cheaper_price_minor, o.currency),
        )


class ScheduleOut(BaseModel):
    stop: str | None = Field(None, description="stops at this time (HH:MM, the deployment's zone)")
    start: str | None = Field(None, description="starts at this time (HH:MM, the deployment's zone)")
    days: list[str] = Field(description='on these days: ["daily"], ["weekdays"], ["weekends"] or e.g. ["mon", "wed"]')
    timezone: str
    description: str
    next_action: str | None = Field(None, description="stop or start")
    next_at: str | None = None

    @classmethod
    def of(cls, v: ScheduleView) -> ScheduleOut:
        return cls(
            stop=v.stop,
            start=v.start,
            days=v.days.split(","),
            timezone=v.timezone,
            description=v.description,
            next_action=v.next_action,
            next_at=iso(v.next_at_ms),
        )


HHMM_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
_DAY = "(mon|tue|wed|thu|fri|sat|sun)"
DAYS_PATTERN = rf"^({_DAY}(-{_DAY})?|daily|weekdays|weekends)$"


HHMM = Annotated[
    str,
    Field(pattern=HHMM_PATTERN),
    limited(
        "invalid_schedule", "a time of day is HH:MM, 00:00 to 23:59 (e.g. 23:00), not {value}", pattern=HHMM_PATTERN
    ),
]


class ScheduleIn(Strict):
    stop: HHMM | None = None
    start: HHMM | None = None
    days: list[
        Annotated[
            str,
            Field(pattern=DAYS_PATTERN),
            limited(
                "invalid_schedule",
                "a day (mon … sun), a range (mon-fri), daily, weekdays or weekends, not {value}",
                pattern=DAYS_PATTERN,
            ),
        ]
    ] = Field(
        default_factory=lambda: ["daily"], min_length=1, max_length=7, description='e.g. ["mon-fri"] or ["sat", "sun"]'
    )


class InstanceOut(BaseModel):
    id: str
    name: str
    status: str
    status_reason: str
    gpu_model: str
    gpu_count: int
    gpu_indices: list[int]
    simulated: bool
    interruptible: bool
    command: list[str]
    exit_code: int | None
    billed_seconds: int
    cost: str
    price_per_hour: str | None
    currency: str
    created_at: str | None
    image: str
    sandbox: dict[str, Any] | None
    storage_cost: str = Field("0", description="the part of cost that is stored workspace while stopped")
    stopped_storage_per_day: str | None = Field(
        None, description="what staying stopped costs per day (its workspace at the storage price); `show` only"
    )
    workspace_release_at: str | None = Field(None, description="when a stopped instance's workspace is released")
    workspace_released_at: str | None = None
    hold_id: str | None = Field(None, description="the package or reservation it runs on (prepaid), if any")
    idle_stop_s: int | None = Field(None, description="stopped after this many seconds with every GPU idle")
    idle_threshold: str = Field("5.0", description="idle means every GPU under this percentage")
    max_duration_s: int | None = Field(None, description="a run is stopped after this many seconds")
    stop_reason: str = Field("", description="why it last stopped (for an idle stop: what was measured)")
    stop_cause: str = Field(
        "",
        description="why it last stopped, as a word to act on: " + ", ".join(StopCause) + "; empty if it never stopped",
    )
    schedule: ScheduleOut | None = Field(None, description="its start/stop schedule; `show` only")
    hints: list[str] = Field(
        default_factory=list, description="efficiency hints from the last 10 minutes' samples; `show` only"
    )
    backend_ref: str | None = Field(
        None, description="where its current or last run is: slurm:JOBID on a Slurm cluster, local:PID; `show` only"
    )
    last_used_at: str | None = Field(
        None, description="when a person last used it (idle auto-stop counts it as use); `show` only"
    )
    last_used_by: str | None = Field(None, description="how: keystrokes (a session) or port traffic; `show` only")

    @classmethod
    def of(cls, v: InstanceView) -> InstanceOut:
        price = None if v.price_per_hour_minor is None else format_minor(v.price_per_hour_minor, v.currency)
        return cls(
            id=v.id,
            name=v.name,
            status=v.status,
            status_reason=v.status_reason,
            gpu_model=v.gpu_model,
            gpu_count=v.gpu_count,
            gpu_indices=v.gpu_indices,
            simulated=v.simulated,
            interruptible=v.interruptible,
            command=v.command,
            exit_code=v.exit_code,
            billed_seconds=v.billed_seconds,
            cost=format_minor(v.cost_minor, v.currency),
            price_per_hour=price,
            currency=v.currency,
            created_at=iso(v.created_at_ms),
            image=v.image,
            sandbox=v.sandbox,
            storage_cost=format_minor(v.storage_cost_minor, v.currency),
            stopped_storage_per_day=None
            if v.stopped_storage_per_day_minor is None
            else format_minor(v.stopped_storage_per_day_minor, v.currency),
            workspace_release_at=iso(v.workspace_release_at_ms),
            workspace_released_at=iso(v.workspace_released_at_ms),
            hold_id=v.hold_id,
            idle_stop_s=v.idle_stop_s,
            idle_threshold=f"{v.idle_threshold_pm // 10}.{v.idle_threshold_pm % 10}",
            max_duration_s=v.max_duration_s,
            stop_reason=v.stop_reason,
            stop_cause=v.stop_cause,
            backend_ref=v.backend_ref,
            last_used_at=iso(v.last_used_ms),
            last_used_by=v.last_used_by,
        )


class EventOut(BaseModel):
    from_status: str
    to_status: str
    reason: str
    at: str | None


class LogChunk(BaseModel):
    text: str
    next_offset: int
