"""Public request and response schemas. Money is a decimal string in the deployment currency."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from danlu.compute.hosts import cpus_text
from danlu.compute.offers import Offer
from danlu.compute.views import InstanceView
from danlu.core.clock import iso
from danlu.core.money import format_minor


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RentRequest(Strict):
    gpu_model: str = Field(min_length=1, max_length=64)
    gpu_count: int = 1
    command: list[str]
    name: str = ""
    interruptible: bool = False
    image: str = Field("host", max_length=64, description="A root filesystem from `GET /images`")
    env: dict[str, str] = Field(default_factory=dict, description="Your own environment variables")


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
        )


class EventOut(BaseModel):
    from_status: str
    to_status: str
    reason: str
    at: str | None


class LogChunk(BaseModel):
    text: str
    next_offset: int


class BalanceOut(BaseModel):
    balance: str
    credit_limit: str
    currency: str


class UserCreate(Strict):
    name: str


class UserOut(BaseModel):
    name: str
    token: str | None = None
    is_admin: bool = False
    suspended_reason: str | None = None
    sandbox_uid: int | None = None


class ReasonIn(Strict):
    reason: str = Field(description="What the renter is told")


class TokenOut(BaseModel):
    name: str
    token: str | None


class ImageIn(Strict):
    name: str
    source: str = Field(description="Absolute path on the server's host: a root filesystem folder or a tarball")
    description: str = ""


class ImageOut(BaseModel):
    name: str
    kind: str
    description: str
    size_bytes: int | None
    created_at: str | None


class HostIn(Strict):
    cpus_per_gpu: float | None = None
    memory_per_gpu_mb: int | None = None
    disk_per_gpu_mb: int | None = None
    pids_per_gpu: int | None = None
    network_policy: str | None = None


class HostOut(BaseModel):
    name: str
    gpus: int
    vcpus_per_gpu: str
    memory_per_gpu_mb: int
    disk_per_gpu_mb: int
    pids_per_gpu: int
    network_policy: str
    sandbox: str
    limits_enforced_by: str
    identity: str
    detail: str


class SandboxOut(BaseModel):
    instance_id: str
    user: str
    job_id: str | None
    host: str
    status: str
    image: str
    uid: int | None
    network: str
    limits: dict[str, Any]


class AmountIn(Strict):
    amount: str


class PriceIn(Strict):
    price_per_hour: str
    interruptible_price_per_hour: str | None = None


class PriceOut(BaseModel):
    gpu_model: str
    price_per_hour: str
    interruptible_price_per_hour: str | None
    currency: str


class TopupOut(BalanceOut):
    created: bool


class GpuOut(BaseModel):
    host: str
    index: int
    uuid: str
    model: str
    nvml_name: str
    vram_mb: int
    simulated: bool
    present: bool
    instance_id: str | None


class QuotaIn(Strict):
    gpus: int | None


class QuotaOut(BaseModel):
    name: str
    gpus: int | None
