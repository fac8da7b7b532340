"""Where GPU time can be bought, and how each plan prices a run: a registry of plan pricers.

A *source* is one place to rent a GPU model: this platform's offer or a public catalog row. A
*plan pricer* turns (source, GPUs, useful hours, deadline) into a quote or ``None`` when the plan
does not exist there. Packages and reserved commitments
are registered from the platform's terms (danlu.billing.commitments); new plans plug in with
:func:`register_plan`; ranking code never names a plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, localcontext
from typing import Protocol

from danlu.billing.commitments import TERMS, format_bp, hold_price
from danlu.billing.rating import Rate, cumulative_cost
from danlu.core.money import exponent, round_minor


class PlatformOffer(Protocol):
    """What the advisor reads of one of this platform's offers: ``danlu.compute.offers.Offer`` is one,
    handed over as it is (no copy that could drop a field: until issue 27 an adapter in ``api/app.py``
    copied four fields and lost the interruptible price). Unpriced offers are not ranked."""

    @property
    def gpu_model(self) -> str: ...
    @property
    def price_per_hour_minor(self) -> int | None: ...  # per GPU-hour, on demand
    @property
    def currency(self) -> str: ...
    @property
    def free(self) -> int: ...
    @property
    def total(self) -> int: ...
    @property
    def interruptible_price_per_hour_minor(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class PlatformPlans:
    """Operator-configured plans beyond on-demand; ``None`` (or a term missing from ``terms``) means
    the plan is not offered. ``terms`` are the packages and reserved commitments on sale
    (danlu.billing.terms): term name → discount in basis points."""

    offpeak_discount_pct: Decimal | None = None
    offpeak_hours_per_day: float = 8.0
    terms: dict[str, int] = field(default_factory=dict)


def offpeak_window(rules: Iterable[tuple[int, str, str, Decimal, Iterable[str]]]) -> tuple[Decimal, float] | None:
    """The operator's time-of-day tariffs as the advisor's one off-peak window: of the rules ``(days a week,
    "HH:MM" from, "HH:MM" to, multiplier, plans)`` that cut the on-demand price, the one that saves most over a
    week (its hours a week × (1 − multiplier)), as (discount %, hours a day averaged over 7 days); None when
    no rule cuts it. A window whose end is not after its start runs past midnight."""

    def minutes(hhmm: str) -> int:
        h, m = hhmm.split(":")
        return int(h) * 60 + int(m)

    best: tuple[Decimal, Decimal, float] | None = None  # (weekly saving, discount %, hours a day)
    for days, start, end, multiplier, plans in rules:
        plans = list(plans)
        if multiplier >= 1 or (plans and "on-demand" not in plans) or days <= 0:
            continue
        hours = Decimal((minutes(end) - minutes(start)) % 1440 or 1440) / 60
        saving = hours * days * (1 - multiplier)
        if best is None or saving > best[0]:
            best = (saving, (1 - multiplier) * 100, float(hours * days / 7))
    return None if best is None else (Decimal(format(best[1].normalize(), "f")), best[2])


@dataclass(frozen=True, slots=True)
class Source:
    provider: str
    region: str
    gpu_model: str
    gpus_per_instance: int  # 1 for this platform: GPUs rent one by one
    rate: Decimal  # per GPU-hour, major units
    spot_rate: Decimal | None
    currency: str
    as_of: date | None
    platform: bool = False
    available: int | None = None
    plans: PlatformPlans = field(default_factory=PlatformPlans)
    source: str = ""  # where the price comes from (the catalog row's source; "this platform")
    outlier: bool = False  # the catalog flags this rate as far below the other providers' median
    instance_type: str = ""  # the catalog row's instance type (tells a PCIe A100 from an SXM one); may be empty
    regions: tuple[str, ...] = ()  # every region with these terms, when several collapse into one row


@dataclass(frozen=True, slots=True)
class PlanContext:
    source: Source
    gpu_count: int
    hours: float  # useful hours of the run
    deadline_hours: float | None
    preemption_overhead: float  # extra fraction of time lost to preemptions on interruptible plans


@dataclass(frozen=True, slots=True)
class PlanQuote:
    plan: str
    wall_hours: float  # hours from start to finish, including preemption losses or deferral
    billed_gpu_hours: Decimal
    cost_minor: int
    note: str = ""


PlanPricer = Callable[[PlanContext], PlanQuote | None]
PLAN_PRICERS: dict[str, PlanPricer] = {}


def register_plan(name: str) -> Callable[[PlanPricer], PlanPricer]:
    def deco(fn: PlanPricer) -> PlanPricer:
        PLAN_PRICERS[name] = fn
        return fn

    return deco


def hours_decimal(hours: float) -> Decimal:
    return Decimal(repr(round(hours, 6)))


def cost_minor(rate: Decimal, gpu_hours: Decimal, currency: str) -> int:
    # Exact at any size the API admits (issue 8: 10^30 tokens overflowed the default 28 digits
    # and answered 500); an absurd workload gets an absurd but true cost.
    with localcontext() as ctx:
        ctx.prec = 120
        return round_minor(rate * gpu_hours * (Decimal(10) ** exponent(currency)))


RATED_HOURS_MAX = 1_000_000.0  # beyond this an estimate is absurd anyway: exact Decimal, not the rater


def quote_minor(rate: Decimal, gpus: int, hours: float, currency: str) -> int:
    """What ``gpus`` GPUs for ``hours`` cost at ``rate`` (major units per GPU-hour). A price that is a
    whole number of minor units (this platform's, and most list prices) is rated by the platform's
    one rater (danlu.billing.rating: whole seconds, rounded once), so the advisor quotes what the
    meter will charge; other prices fall back to the exact product, rounded once."""
    minor = rate.scaleb(exponent(currency))
    if minor == minor.to_integral_value() and 0 <= hours <= RATED_HOURS_MAX:
        return cumulative_cost(Rate(int(minor), gpus, 0), round(hours * 3600))
    return cost_minor(rate, hours_decimal(hours) * gpus, currency)


def _billed_gpus(ctx: PlanContext) -> int:
    """Clouds rent whole instances: the GPUs paid for are the instances needed × GPUs per instance."""
    per = ctx.source.gpus_per_instance
    return math.ceil(ctx.gpu_count / per) * per


def _within(ctx: PlanContext, wall: float) -> bool:
    return ctx.deadline_hours is None or wall <= ctx.deadline_hours


@register_plan("on-demand")
def on_demand(ctx: PlanContext) -> PlanQuote | None:
    if not _within(ctx, ctx.hours):
        return None
    gh = hours_decimal(ctx.hours) * _billed_gpus(ctx)
    return PlanQuote(
        "on-demand", ctx.hours, gh, quote_minor(ctx.source.rate, _billed_gpus(ctx), ctx.hours, ctx.source.currency)
    )


@register_plan("interruptible")
def interruptible(ctx: PlanContext) -> PlanQuote | None:
    if ctx.source.spot_rate is None:
        return None
    wall = ctx.hours * (1 + ctx.preemption_overhead)
    if not _within(ctx, wall):
        return None
    gh = hours_decimal(wall) * _billed_gpus(ctx)
    note = f"+{ctx.preemption_overhead:.0%} time for preemptions (checkpoint and resume)"
    cost = quote_minor(ctx.source.spot_rate, _billed_gpus(ctx), wall, ctx.source.currency)
    return PlanQuote("interruptible", wall, gh, cost, note)


@register_plan("off-peak")
def off_peak(ctx: PlanContext) -> PlanQuote | None:
    plans = ctx.source.plans
    if plans.offpeak_discount_pct is None or plans.offpeak_hours_per_day <= 0:
        return None
    wall = ctx.hours * 24.0 / plans.offpeak_hours_per_day  # runs only in the off-peak window
    if not _within(ctx, wall):
        return None
    gh = hours_decimal(ctx.hours) * _billed_gpus(ctx)
    rate = ctx.source.rate * (1 - plans.offpeak_discount_pct / 100)
    note = f"runs {plans.offpeak_hours_per_day:g} off-peak h/day at -{plans.offpeak_discount_pct}%"
    return PlanQuote("off-peak", wall, gh, cost_minor(rate, gh, ctx.source.currency), note)


def _term(ctx: PlanContext, name: str) -> PlanQuote | None:
    """A package or reserved commitment this platform sells (danlu.billing.commitments): whole terms,
    used or not, priced as the platform prices a purchase (the one rater, rounded once)."""
    discount_bp = ctx.source.plans.terms.get(name)
    if discount_bp is None or not _within(ctx, ctx.hours):
        return None
    t = TERMS[name]
    period_h = t.seconds // 3600
    periods = max(1, math.ceil(ctx.hours / period_h - 1e-9))
    gpus = _billed_gpus(ctx)
    gh = Decimal(periods * period_h * gpus)
    minor = ctx.source.rate.scaleb(exponent(ctx.source.currency))
    if minor == minor.to_integral_value():
        cost = periods * hold_price(int(minor), gpus, t.seconds, discount_bp)
    else:
        cost = cost_minor(ctx.source.rate * (1 - Decimal(discount_bp) / 10_000), gh, ctx.source.currency)
    note = f"{periods} × {t.label} at -{format_bp(discount_bp)}, paid whether used or not"
    return PlanQuote(name, ctx.hours, gh, cost, note)


def _term_pricer(name: str) -> PlanPricer:
    return lambda ctx: _term(ctx, name)


for _name in TERMS:
    register_plan(_name)(_term_pricer(_name))
