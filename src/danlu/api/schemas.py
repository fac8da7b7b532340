"""Public request and response schemas. Money is a decimal string in the deployment currency."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

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
