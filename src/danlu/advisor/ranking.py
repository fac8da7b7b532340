"""Rank every (GPU model, count, place, plan) for a workload by total cost, time beside it.

Currencies are never converted: each option carries its own. Options in the *primary* currency
(the platform's, or USD when the platform has no offers) rank first; within a currency, fitting
options rank by cost, then time. Options that do not fit follow, with the changes that would
make them fit; their cost is what the same run would cost if it fitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from danlu.advisor import memory
from danlu.advisor.interconnect import link_for
from danlu.advisor.plans import PLAN_PRICERS, PlanContext, PlatformOffer, PlatformPlans, Source
from danlu.advisor.timing import Measured, Spread, efficiency, estimate_hours, measured_spread
from danlu.advisor.workload import Workload, within
from danlu.catalog.gpu_models import GpuModel, gpu_models
from danlu.catalog.prices import PriceCatalog, source_label
from danlu.core.money import exponent, format_minor

PLATFORM_PROVIDER = "this platform"
PLATFORM_COUNTS = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class Option:
    gpu_model: str
    gpu_count: int
    fits: bool
    sharding: str
    memory: memory.MemoryBreakdown
    capacity_gb: float
    hours: float  # wall-clock, plan included
    cost_minor: int
    currency: str
    provider: str
    region: str
    plan: str
    note: str
    as_of: str | None
    fixes: tuple[str, ...]
    source: str = ""  # where the price comes from: a catalog row's source, or "this platform"
    outlier: bool = False  # the price is flagged far below the other providers' median
    efficiency: float = 1.0  # per-GPU scaling efficiency the time estimate assumed (1.0 on one GPU)
    interconnect: str = ""  # the link between the GPUs the estimate assumed ("" on one GPU)
    spread: Spread | None = None  # how differently machines of this GPU model scaled at this count, if measured

    @property
    def source_label(self) -> str:
        return source_label(self.source) if self.source else ""

    @property
    def headroom(self) -> float:
        return memory.headroom(self.memory.total, self.capacity_gb * memory.GB)

    @property
    def tight(self) -> bool:
        """Fits with under ``memory.TIGHT_HEADROOM`` of the card left: flagged, not trusted."""
        return self.fits and self.headroom < memory.TIGHT_HEADROOM

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "fits": self.fits,
            "tight": self.tight,
            "headroom_pct": round(100 * self.headroom, 1),
            "memory_gb": round(self.memory.total / memory.GB, 2),
            "capacity_gb": round(self.capacity_gb, 2),
            "memory_gib": round(self.memory.total / memory.GIB, 2),
            "capacity_gib": round(self.capacity_gb * memory.GB / memory.GIB, 2),
            "memory_breakdown_gb": self.memory.as_gb(),
            "sharding": self.sharding,
            "scaling_efficiency": round(self.efficiency, 3),
            "interconnect": self.interconnect,
            "scaling_measured": None
            if self.spread is None
            else {
                "lowest": self.spread.lowest,
                "highest": self.spread.highest,
                "machines": self.spread.machines,
                "workload": self.spread.workload,
                "text": self.spread.text(self.gpu_count),
            },
            "hours": round(self.hours, 2),
            "cost": format_minor(self.cost_minor, self.currency),
            "currency": self.currency,
            "provider": self.provider,
            "on_this_platform": self.provider == PLATFORM_PROVIDER,
            "region": self.region,
            "plan": self.plan,
            "note": self.note,
            "as_of": self.as_of,
            "source": self.source,
            "source_label": self.source_label,
            "outlier": self.outlier,
            "fixes": list(self.fixes),
        }


def platform_sources(offers: Iterable[PlatformOffer], plans: PlatformPlans) -> list[Source]:
    out = []
    minor = Decimal(1)
    for o in offers:
        if o.price_per_hour_minor is None:
            continue  # not for rent until the operator prices it
        scale = minor.scaleb(-exponent(o.currency))
        spot = o.interruptible_price_per_hour_minor
        out.append(
            Source(
                PLATFORM_PROVIDER,
                "local",
                o.gpu_model,
                1,
                o.price_per_hour_minor * scale,
                spot * scale if spot is not None else None,
                o.currency.upper(),
                None,
                True,
                o.total,
                plans,
                PLATFORM_PROVIDER,
            )
        )
    return out


_SourceKey = tuple[str, str, int, Decimal, Decimal | None, str, date, str, bool, str]


def catalog_sources(catalog: PriceCatalog, include_outliers: bool = False) -> list[Source]:
    """The catalog rows in use (newest of each instance; outliers only if asked for). Rows with
    identical terms in several regions collapse into one, regions listed in ``region``."""
    groups: dict[_SourceKey, list[str]] = {}
    first: dict[_SourceKey, Source] = {}
    for r in catalog.usable(include_outliers):
        key = (r.provider, r.gpu_model, r.gpus, r.price_per_gpu_hour, r.spot_per_gpu_hour, r.currency, r.as_of,
               r.source, r.outlier, r.instance_type)  # fmt: skip
        groups.setdefault(key, []).append(r.region)
        first.setdefault(
            key,
            Source(
                r.provider,
                r.region,
                r.gpu_model,
                r.gpus,
                r.price_per_gpu_hour,
                r.spot_per_gpu_hour,
                r.currency,
                r.as_of,
                source=r.source,
                outlier=r.outlier,
                instance_type=r.instance_type,
            ),
        )
    out = []
    for key, src in first.items():
        regions = groups[key]
        region = regions[0] if len(regions) == 1 else f"{regions[0]} (+{len(regions) - 1} more)"
        out.append(
            Source(
                src.provider,
                region,
                src.gpu_model,
                src.gpus_per_instance,
                src.rate,
                src.spot_rate,
                src.currency,
                src.as_of,
                source=src.source,
                outlier=src.outlier,
                instance_type=src.instance_type,
                regions=tuple(regions),
            )
        )
    return out


NO_BF16 = frozenset({"Volta", "Turing", "Pascal", "Maxwell", "Kepler"})  # no bf16 arithmetic (Ampere+ has it)


def precision_on(w: Workload, gpu: GpuModel) -> Workload:
    """The precision the run would really use there: bf16 asked on a GPU without bf16 is priced as
    fp16 mixed precision (tensor cores where it has them), what a user would run instead, not at a
    bf16 speed the card does not have."""
    return w.with_(precision="fp16") if w.precision == "bf16" and gpu.architecture in NO_BF16 else w


def precision_note(w: Workload, gpu: GpuModel) -> str:
    if precision_on(w, gpu) is w:
        return ""
    return f"{gpu.name} ({gpu.architecture}) has no bf16: priced as fp16 mixed precision (use a GradScaler)"


def _fit_config(w: Workload, gpu: GpuModel, n: int) -> tuple[Workload, bool]:
    """With sharding "auto" pick the lightest ZeRO stage that fits (none on one GPU)."""
    if w.sharding != "auto":
        return w, memory.fits(w, gpu, n)
    stages = ("ddp",) if n == 1 or not w.training else ("ddp", "zero1", "zero2", "zero3")
    for stage in stages:
        cand = w.with_(sharding=stage)
        if memory.fits(cand, gpu, n):
            return cand, True
    return w.with_(sharding=stages[-1]), False


def rank_options(
    w: Workload,
    sources: Sequence[Source],
    *,
    deadline_hours: float | None = None,
    measured: Measured | None = None,
    preemption_overhead: float = 0.10,
    primary_currency: str | None = None,
    only_models: Sequence[str] | None = None,
) -> list[Option]:
    """All priced options, sorted: primary currency first, then fitting by (cost, hours), then the rest."""
    within("deadline", deadline_hours, 0, 1e6)
    within("preemption_overhead", preemption_overhead, 0, 5, lo_open=False)
    models = gpu_models()
    primary = (primary_currency or next((s.currency for s in sources if s.platform), "USD")).upper()
    cache: dict[
        tuple[str, int, str],
        tuple[Workload, bool, memory.MemoryBreakdown, float, float, tuple[str, ...], Spread | None],
    ] = {}
    best: dict[tuple[str, str, int, str, str], Option] = {}
    for src in sources:
        gpu = models.get(src.gpu_model)
        if gpu is None or (only_models and src.gpu_model not in only_models):
            continue
        counts = [c for c in PLATFORM_COUNTS if c <= (src.available or 0)] if src.platform else [src.gpus_per_instance]
        link = link_for(gpu, src.instance_type)
        for n in counts:
            key = (gpu.name, n, link.name)
            if key not in cache:
                cfg, ok = _fit_config(precision_on(w, gpu), gpu, n)
                fixes = () if ok else tuple(memory.fixes(cfg, gpu, n))
                hours = estimate_hours(cfg, gpu, n, measured, link=link)
                eff = efficiency(cfg, gpu, n, link)
                cache[key] = (cfg, ok, memory.estimate(cfg, n), hours, eff, fixes, measured_spread(cfg, gpu, n))
            cfg, ok, mem, hours, eff, fixes, spread = cache[key]
            for pricer in PLAN_PRICERS.values():
                quote = pricer(PlanContext(src, n, hours, deadline_hours, preemption_overhead))
                if quote is None:
                    continue
                opt = Option(
                    gpu.name,
                    n,
                    ok,
                    cfg.sharding,
                    mem,
                    memory.capacity_bytes(gpu) / memory.GB,
                    quote.wall_hours,
                    quote.cost_minor,
                    src.currency,
                    src.provider,
                    src.region,
                    quote.plan,
                    "; ".join(x for x in (precision_note(w, gpu), quote.note) if x),
                    src.as_of.isoformat() if src.as_of else None,
                    fixes,
                    src.source,
                    src.outlier,
                    eff,
                    link.name if n > 1 else "",
                    spread,
                )
                bkey = (src.provider, gpu.name, n, quote.plan, src.currency)
                if bkey not in best or opt.cost_minor < best[bkey].cost_minor:
                    best[bkey] = opt
    return sorted(
        best.values(),
        key=lambda o: (
            not o.fits,
            o.currency != primary,
            o.currency,
            o.cost_minor,
            o.hours,
            o.gpu_model,
            o.provider,
        ),
    )
