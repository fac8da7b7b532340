"""Advisor endpoints (mounted under /api/v1). Thin: parse, call one service function, return a schema.

``get_platform_offers`` / ``get_platform_plans`` (danlu.advisor.deps) are overridden by the app to
read this platform's offers; by default advice uses the public catalog only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from danlu.advisor import service
from danlu.advisor.deps import get_platform_offers, get_platform_plans
from danlu.advisor.plan_recommender import UsageProfile
from danlu.advisor.plans import PlatformOffer, PlatformPlans
from danlu.advisor.workload import ADAPTERS, OPTIMIZERS, PRECISIONS, PRESETS, SHARDINGS, TASKS, build_workload
from danlu.api.deps import Public
from danlu.api.schemas.common import (
    GPU_MODEL_PATTERN,
    GPU_MODEL_TEXT,
    MAX_GPUS,
    POSITIVE_AMOUNT,
    TERM_CHOICES,
    Strict,
    WholeNumber,
    choice_pattern,
    errors,
    limited,
)
from danlu.catalog.gpu_models import gpu_models
from danlu.core.money import CURRENCY_EXPONENTS

router = APIRouter(tags=["advisor"], responses=errors(401), dependencies=[Public])
# The advisor's numbers are bounded so every answer is finite (issue 8: tokens=1e30, hours=inf
# answered 500); the bounds are far beyond any real workload.
_FAMILIES = sorted({m[: i.start()] for m in gpu_models() for i in re.finditer("-", m)})
GPU_OR_FAMILY = choice_pattern([*gpu_models(), *_FAMILIES], dashes="catalog")
GPU_OR_FAMILY_TEXT = GPU_MODEL_TEXT + "; or a family: " + ", ".join(_FAMILIES)
_UNKNOWN = "unknown GPU model {value}; known models: " + ", ".join(gpu_models())
# A model (exactly one), or a model or a family (danlu.catalog.prices.models_matching: A100 → both A100s).
Gpu = Annotated[
    str,
    Field(pattern=GPU_MODEL_PATTERN, description=GPU_MODEL_TEXT),
    limited("unknown_gpu_model", _UNKNOWN, pattern=GPU_MODEL_PATTERN),
]
GpuOrFamily = Annotated[
    str,
    Field(pattern=GPU_OR_FAMILY, description=GPU_OR_FAMILY_TEXT),
    limited("unknown_gpu_model", _UNKNOWN, pattern=GPU_OR_FAMILY),
]
Currency = Annotated[str, Field(pattern=choice_pattern(CURRENCY_EXPONENTS), description="ISO 4217, e.g. CNY")]
Count = Annotated[int, Field(ge=1, le=MAX_GPUS), WholeNumber]
Whole = Annotated[int, Field(ge=1, le=1 << 20), WholeNumber]
Amount = Annotated[float, Field(ge=1e-3, le=1e18, allow_inf_nan=False)]


def _one_of(values: tuple[str, ...]) -> Any:
    return Field(pattern=choice_pattern(values, dashes="loose"), description=" | ".join(values))


def _else(values: tuple[str, ...], field: str) -> Any:
    """One of ``values``, as danlu.advisor.workload._choice takes it, with its own error code."""
    text = f"{field} {{value}} is not one of: {', '.join(values)}"
    return limited(f"invalid_{field}", text, pattern=choice_pattern(values, dashes="loose"))


Task = Annotated[str, _one_of(TASKS), _else(TASKS, "task")]
Precision = Annotated[str, _one_of(PRECISIONS), _else(PRECISIONS, "precision")]
Optimizer = Annotated[str, _one_of(OPTIMIZERS), _else(OPTIMIZERS, "optimizer")]
Adapter = Annotated[str, _one_of(ADAPTERS), _else(ADAPTERS, "adapter")]
Sharding = Annotated[str, _one_of(SHARDINGS), _else(SHARDINGS, "sharding")]


OUTLIERS_TEXT = (
    "also rank public prices flagged outlier (under 1/3 of the other providers' median for the GPU model), "
    "marked outlier: true; default false: left out"
)
SOURCE_TEXT = "where the price comes from: the public catalog row's source (full attribution), or 'this platform'"
SOURCE_LABEL_TEXT = "short name of source for tables: FSDL cloud-gpus, SkyPilot lambda/gcp/vast, this platform"
AS_OF_TEXT = "the day the price was observed (YYYY-MM-DD; the source's list date where the row carries none)"
OUTLIER_TEXT = "the price is far below the other providers' median (under 1/3): shown only with include_outliers"

OffersDep = Annotated[Sequence[PlatformOffer], Depends(get_platform_offers)]
PlansDep = Annotated[PlatformPlans, Depends(get_platform_plans)]


class AdviceRequest(Strict):
    """Give ``params`` or a preset ``model``, and the work as ``tokens`` or ``samples`` (× ``epochs``);
    int8/int4 are for inference, adapters for fine-tuning (answered 422 otherwise)."""

    params: float | None = Field(None, ge=1e5, le=5e12, allow_inf_nan=False, description="parameter count, e.g. 7e9")
    model: str | None = Field(None, pattern=choice_pattern(PRESETS), description="preset: " + ", ".join(PRESETS))
    task: Task = "finetune"
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    micro_batch: Whole = 1
    seq_len: Whole | None = None
    image_size: Whole | None = None
    grad_accum: Whole = 1
    checkpointing: bool = False
    adapter: Adapter = "none"
    lora_rank: Whole = 16
    sharding: Sharding = "auto"
    tokens: Amount | None = None
    samples: Amount | None = None
    epochs: float = Field(1.0, ge=1e-3, le=1e6, allow_inf_nan=False)
    deadline_hours: float | None = Field(None, ge=1e-3, le=1e6, allow_inf_nan=False)
    measured_per_second: Amount | None = Field(None, description="throughput you measured; give measured_gpu")
    measured_gpu: Gpu | None = None
    measured_gpu_count: Count = 1
    preemption_overhead: float = Field(0.10, ge=0, le=5, allow_inf_nan=False)
    currency: Currency | None = None
    gpu: GpuOrFamily | None = None
    include_public: bool = True
    include_outliers: bool = Field(False, description=OUTLIERS_TEXT)


class ScalingSpreadOut(BaseModel):
    lowest: float
    highest: float
    machines: int
    workload: str = Field(description="the measured workload the advisor's estimate is built on")
    text: str


class OptionOut(BaseModel):
    gpu_model: str
    gpu_count: int
    fits: bool
    tight: bool = Field(description="fits with under 3 % of the card's memory left: expect out-of-memory")
    headroom_pct: float = Field(description="the card's memory left, percent (negative: does not fit)")
    memory_gb: float
    capacity_gb: float
    memory_gib: float = Field(description="per GPU, in GiB: the unit of the card's name (A100-80GB = 80 GiB)")
    capacity_gib: float
    memory_breakdown_gb: dict[str, float]
    sharding: str
    scaling_efficiency: float = Field(
        description="per-GPU efficiency the estimate assumed: the measured scaling curve of this GPU (or the most "
        "similar measured one) times the interconnect term; 1.0 on one GPU"
    )
    interconnect: str = Field(description="the link the GPUs are assumed to talk over (empty on one GPU)")
    scaling_measured: ScalingSpreadOut | None = Field(
        None,
        description="where machines of this GPU model were measured at this GPU count on 3 or more machines: the "
        "lowest and highest per-GPU efficiency they reached (identical GPUs scale differently; the estimate uses "
        "the median); null elsewhere",
    )
    hours: float
    cost: str
    currency: str
    provider: str
    on_this_platform: bool = Field(
        description="rentable here: `danlu rent --gpu GPU_MODEL --count GPU_COUNT`, or a stopped rental resized onto "
        "it with `danlu start ID --gpu GPU_MODEL --count GPU_COUNT`"
    )
    region: str
    plan: str
    note: str
    as_of: str | None = Field(description=AS_OF_TEXT + "; null for this platform's offers")
    source: str = Field(description=SOURCE_TEXT)
    source_label: str = Field(description=SOURCE_LABEL_TEXT)
    outlier: bool = Field(description=OUTLIER_TEXT)
    fixes: list[str]


class AdviceResponse(BaseModel):
    source: str
    primary_currency: str
    currency_note: str
    catalog_snapshot: str
    catalog_origin: str
    catalog_age_days: int
    outliers_left_out: int = Field(description="public rows flagged outlier, not ranked (0 with include_outliers)")
    outlier_note: str = Field(description="the outlier rule, in words")
    options: list[OptionOut]


@router.post("/advice", response_model=AdviceResponse, responses=errors(400))
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
        "include_outliers",
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
        include_outliers=body.include_outliers,
    )
    source = f"server: {len(offers)} platform offer(s)" + (" + public catalog" if body.include_public else "")
    return AdviceResponse(source=source, **result.meta(), options=[OptionOut(**o.to_dict()) for o in result.options])


class CompareRow(BaseModel):
    provider: str
    region: str = Field(description="a region with this price (the first of `regions`)")
    regions: list[str] = Field(description="every region with the same instance, price and date")
    gpu_model: str
    instance_type: str
    gpus_billed: int
    machines: int = Field(description="instances: 1 unless multi_machine")
    price_per_hour: str
    total: str
    currency: str
    spot: bool
    as_of: str = Field(description=AS_OF_TEXT)
    source: str = Field(description=SOURCE_TEXT)
    source_label: str = Field(description=SOURCE_LABEL_TEXT)
    outlier: bool = Field(description=OUTLIER_TEXT)


@router.get("/advice/compare", response_model=list[CompareRow])
def get_compare(
    gpu: Annotated[GpuOrFamily, Query()],
    hours: Annotated[float, Query(ge=1e-3, le=1e6, allow_inf_nan=False)] = 1.0,
    count: Annotated[int, Query(ge=1, le=MAX_GPUS)] = 1,
    spot: bool = False,
    multi_machine: Annotated[bool, Query(description="also several smaller instances (default: one machine)")] = False,
    include_outliers: Annotated[bool, Query(description=OUTLIERS_TEXT)] = False,
) -> list[CompareRow]:
    """Public catalog rows in use (the newest of each instance), cheapest total first."""
    rows = service.compare(
        gpu, hours=hours, count=count, spot=spot, multi_machine=multi_machine, include_outliers=include_outliers
    )
    return [CompareRow(**r) for r in rows]


Percent = Annotated[float, Field(ge=0, lt=100, allow_inf_nan=False)]


def _dec(value: float) -> Decimal:
    """A JSON number as the decimal it was written as (0.15 → Decimal("0.15"))."""
    return Decimal(repr(value))


class PlanRequest(Strict):
    gpu: GpuOrFamily
    hours_per_day: float = Field(ge=1e-3, le=24, allow_inf_nan=False)
    days_per_week: float = Field(7, ge=1e-3, le=7, allow_inf_nan=False)
    weeks: float = Field(4, ge=1e-3, le=520, allow_inf_nan=False)
    predictability: float = Field(1.0, ge=1e-3, le=1, allow_inf_nan=False)
    gpus: Count = 1
    discounts_pct: dict[Annotated[str, Field(pattern=f"^({TERM_CHOICES})$")], Percent] = Field(
        default_factory=dict, max_length=16, description="What-if discounts by term; default: the terms on sale here"
    )
    include_outliers: bool = Field(False, description=OUTLIERS_TEXT + " (for the public hourly rate)")


class PlanCostOut(BaseModel):
    plan: str
    cost: str
    note: str


class PlanOut(BaseModel):
    best: str
    currency: str
    plans: list[PlanCostOut]
    break_even: list[str]
    hourly_rate: str
    rate_source: str
    discount_source: str


class BuyMonthOut(BaseModel):
    month: int
    buy: str
    rent: str


class BuyOut(BaseModel):
    currency: str
    months: int
    cheaper: str
    rent_rate: str | None
    rent_rate_source: str | None
    total_buy: str
    total_rent: str
    break_even_utilisation: float | None
    cumulative: list[BuyMonthOut]


@router.post("/advice/plan", response_model=PlanOut, responses=errors(400))
def post_plan(body: PlanRequest, offers: OffersDep, plans: PlansDep) -> PlanOut:
    """Hourly against this platform's packages and reservations on sale (or ``discounts_pct``, a
    what-if: term → percent off), for a usage profile."""
    profile = UsageProfile(body.hours_per_day, body.days_per_week, body.weeks, body.predictability)
    discounts = {name: _dec(pct) for name, pct in body.discounts_pct.items()}
    return PlanOut.model_validate(
        service.plan_advice(
            body.gpu,
            profile,
            gpus=body.gpus,
            platform_offers=offers,
            platform_terms=plans.terms,
            discounts=discounts,
            include_outliers=body.include_outliers,
        )
    )


class BuyRequest(Strict):
    gpu: Gpu
    purchase_price: str = Field(pattern=POSITIVE_AMOUNT, description="in `currency`, e.g. 25000")
    currency: Currency = "USD"
    rent_rate: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False, description="per GPU-hour")
    kwh_price: float = Field(0.15, ge=0, le=1000, allow_inf_nan=False)
    pue: float = Field(1.5, ge=1, le=10, allow_inf_nan=False)
    years: Annotated[int, Field(ge=1, le=15), WholeNumber] = 3
    resale_pct: float = Field(20, ge=0, lt=100, allow_inf_nan=False)
    utilisation: float = Field(0.5, gt=0, le=1, allow_inf_nan=False)
    hosting_per_month: str = Field("0", pattern=POSITIVE_AMOUNT.replace("^(", "^(0|", 1))
    include_outliers: bool = Field(False, description=OUTLIERS_TEXT + " (for the default rent_rate)")


@router.post("/advice/buy", response_model=BuyOut, responses=errors(400))
def post_buy(body: BuyRequest, offers: OffersDep) -> BuyOut:
    result = service.buy_advice(
        body.gpu,
        purchase_price=body.purchase_price,
        currency=body.currency,
        rent_rate=None if body.rent_rate is None else _dec(body.rent_rate),
        kwh_price=_dec(body.kwh_price),
        pue=_dec(body.pue),
        years=body.years,
        resale_pct=_dec(body.resale_pct),
        utilisation=_dec(body.utilisation),
        hosting_per_month=body.hosting_per_month,
        platform_offers=offers,
        include_outliers=body.include_outliers,
    )
    return BuyOut.model_validate(result.to_dict())
