"""Advisor endpoints (mounted under /api/v1). Thin: parse, call one service function, return a schema.

``get_platform_offers`` / ``get_platform_plans`` (danlu.advisor.deps) are overridden by the app to
read this platform's offers; by default advice uses the public catalog only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from danlu.advisor import service
from danlu.advisor.deps import get_platform_offers, get_platform_plans
from danlu.advisor.plan_recommender import UsageProfile
from danlu.advisor.plans import PlatformOffer, PlatformPlans
from danlu.advisor.workload import build_workload

router = APIRouter(tags=["advisor"])
OffersDep = Annotated[list[PlatformOffer], Depends(get_platform_offers)]
PlansDep = Annotated[PlatformPlans, Depends(get_platform_plans)]


class AdviceRequest(BaseModel):
    params: float | None = Field(None, description="parameter count, e.g. 7e9")
    model: str | None = Field(None, description="preset: llama-7b, bert-large, resnet50, sdxl-unet, ...")
    task: str = "finetune"
    precision: str = "bf16"
    optimizer: str = "adamw"
    micro_batch: int = 1
    seq_len: int | None = None
    image_size: int | None = None
    grad_accum: int = 1
    checkpointing: bool = False
    adapter: str = "none"
    lora_rank: int = 16
    sharding: str = "auto"
    tokens: float | None = None
    samples: float | None = None
    epochs: float = 1.0
    deadline_hours: float | None = None
    measured_per_second: float | None = None
    measured_gpu: str | None = None
    measured_gpu_count: int = 1
    preemption_overhead: float = 0.10
    currency: str | None = None
    gpu: str | None = None
    include_public: bool = True


class OptionOut(BaseModel):
    gpu_model: str
    gpu_count: int
    fits: bool
    memory_gb: float
    capacity_gb: float
    memory_breakdown_gb: dict[str, float]
    sharding: str
    hours: float
    cost: str
    currency: str
    provider: str
    region: str
    plan: str
    note: str
    as_of: str | None
    fixes: list[str]


class AdviceResponse(BaseModel):
    source: str
    primary_currency: str
    currency_note: str
    catalog_snapshot: str
    catalog_origin: str
    catalog_age_days: int
    options: list[OptionOut]


@router.post("/advice", response_model=AdviceResponse)
def post_advice(body: AdviceRequest, offers: OffersDep, plans: PlansDep) -> AdviceResponse:
    w_fields = set(AdviceRequest.model_fields) - {
        "deadline_hours",
        "measured_per_second",
        "measured_gpu",
        "measured_gpu_count",
        "preemption_overhead",
        "currency",
        "gpu",
        "include_public",
    }
    workload = build_workload(**body.model_dump(include=w_fields))
    result = service.advise(
        workload,
        today=datetime.now(UTC).date(),
        platform_offers=offers,
        platform_plans=plans,
        include_public=body.include_public,
        deadline_hours=body.deadline_hours,
        measured_per_second=body.measured_per_second,
        measured_gpu=body.measured_gpu,
        measured_gpu_count=body.measured_gpu_count,
        preemption_overhead=body.preemption_overhead,
        currency=body.currency,
        gpu=body.gpu,
    )
    source = f"server: {len(offers)} platform offer(s)" + (" + public catalog" if body.include_public else "")
    return AdviceResponse(source=source, **result.meta(), options=[OptionOut(**o.to_dict()) for o in result.options])


class CompareRow(BaseModel):
    provider: str
    region: str
    gpu_model: str
    instance_type: str
    gpus_billed: int
    price_per_hour: str
    total: str
    currency: str
    spot: bool
    as_of: str


@router.get("/advice/compare", response_model=list[CompareRow])
def get_compare(gpu: str, hours: float = 1.0, count: int = 1, spot: bool = False) -> list[CompareRow]:
    return [CompareRow(**r) for r in service.compare(gpu, hours=hours, count=count, spot=spot)]


class PlanRequest(BaseModel):
    gpu: str
    hours_per_day: float
    days_per_week: float = 7
    weeks: float = 4
    predictability: float = 1.0
    gpus: int = 1
    discounts_pct: dict[str, Decimal] = Field(default_factory=dict)


@router.post("/advice/plan")
def post_plan(body: PlanRequest, offers: OffersDep) -> dict[str, Any]:
    profile = UsageProfile(body.hours_per_day, body.days_per_week, body.weeks, body.predictability)
    return service.plan_advice(body.gpu, profile, gpus=body.gpus, platform_offers=offers, discounts=body.discounts_pct)


class BuyRequest(BaseModel):
    gpu: str
    purchase_price: str
    currency: str = "USD"
    rent_rate: Decimal | None = None
    kwh_price: Decimal = Decimal("0.15")
    pue: Decimal = Decimal("1.5")
    years: int = 3
    resale_pct: Decimal = Decimal(20)
    utilisation: Decimal = Decimal("0.5")
    hosting_per_month: str = "0"


@router.post("/advice/buy")
def post_buy(body: BuyRequest, offers: OffersDep) -> dict[str, Any]:
    result = service.buy_advice(
        body.gpu,
        purchase_price=body.purchase_price,
        currency=body.currency,
        rent_rate=body.rent_rate,
        kwh_price=body.kwh_price,
        pue=body.pue,
        years=body.years,
        resale_pct=body.resale_pct,
        utilisation=body.utilisation,
        hosting_per_month=body.hosting_per_month,
        platform_offers=offers,
    )
    return result.to_dict()
