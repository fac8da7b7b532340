"""Plan recommender: from a usage profile, the cheapest of hourly and the packages and reserved
commitments on offer, with the break-even usage of each against hourly.

Package and reserved prices are the discounts off the hourly rate that the caller passes: this
platform's terms on sale (danlu.billing.terms), or what-if discounts the user gives. There are no
built-in discounts: a term nobody sells is not priced. A package is paid whether used or not, so
``predictability`` p (0 < p ≤ 1) says usage may fall to p × plan: a package is recommended only if
it is cheaper than hourly *even then*. Terms are those of danlu.billing.commitments (a month is 30
days; a reservation runs its whole term even when the profile is shorter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from danlu.advisor.plans import cost_minor, hours_decimal
from danlu.billing.commitments import TERMS
from danlu.core.errors import InvalidInput
from danlu.core.money import format_minor

PERIOD_HOURS = {name: t.seconds // 3600 for name, t in TERMS.items()}


@dataclass(frozen=True, slots=True)
class UsageProfile:
    hours_per_day: float
    days_per_week: float
    weeks: float
    predictability: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.hours_per_day <= 24:
            raise InvalidInput("invalid_hours_per_day", "hours per day must be more than 0 and at most 24")
        if not 0 < self.days_per_week <= 7:
            raise InvalidInput("invalid_days_per_week", "days per week must be more than 0 and at most 7")
        if not 0 < self.weeks <= 520:
            raise InvalidInput("invalid_weeks", "weeks must be more than 0 and at most 520")
        if not 0 < self.predictability <= 1:
            raise InvalidInput(
                "invalid_predictability",
                "predictability is a fraction: 1 = usage exactly as planned, 0.5 = may halve",
            )


@dataclass(frozen=True, slots=True)
class PlanCost:
    plan: str
    cost_minor: int
    note: str


@dataclass(frozen=True, slots=True)
class PlanRecommendation:
    best: str
    currency: str
    costs: tuple[PlanCost, ...]  # cheapest first
    break_even: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "best": self.best,
            "currency": self.currency,
            "plans": [
                {"plan": c.plan, "cost": format_minor(c.cost_minor, self.currency), "note": c.note} for c in self.costs
            ],
            "break_even": list(self.break_even),
        }


def recommend_plan(
    profile: UsageProfile,
    hourly_rate: Decimal,
    currency: str,
    gpus: int = 1,
    discounts: dict[str, Decimal] | None = None,
) -> PlanRecommendation:
    """Total cost of hourly and of each term in ``discounts`` (term → percent off) over
    ``profile.weeks`` for ``gpus`` GPUs. ``hourly_rate`` is in major units per GPU-hour."""
    if gpus < 1 or hourly_rate <= 0:
        raise InvalidInput("invalid_plan_input", "gpus and the hourly rate must be positive")
    disc = dict(discounts or {})
    for name, d in disc.items():
        if name not in TERMS:
            raise InvalidInput("invalid_term", f"{name!r} is not a term; use one of {', '.join(TERMS)}")
        if not Decimal(0) <= d < Decimal(100):
            raise InvalidInput("invalid_discount", f"{name} discount must be a percentage in [0, 100)")
    p = profile
    days = p.days_per_week * p.weeks
    planned_h = p.hours_per_day * days
    low_h = planned_h * p.predictability
    span_days = p.weeks * 7
    costs = [
        PlanCost(
            "hourly",
            cost_minor(hourly_rate, hours_decimal(low_h) * gpus, currency),
            f"{low_h:.0f} GPU-hours used" + (f" (of {planned_h:.0f} planned)" if low_h < planned_h else ""),
        )
    ]
    for plan in TERMS:
        if plan not in disc:
            continue
        t_days = TERMS[plan].seconds // 86_400
        # A day package covers a day of use; longer terms cover the calendar span they run over.
        n = math.ceil(days - 1e-9) if t_days == 1 else math.ceil(span_days / t_days - 1e-9)
        rate = hourly_rate * (1 - disc[plan] / 100)
        gh = Decimal(n * PERIOD_HOURS[plan] * gpus)
        costs.append(PlanCost(plan, cost_minor(rate, gh, currency), f"{n} × {PERIOD_HOURS[plan]} h at -{disc[plan]}%"))
    costs.sort(key=lambda c: (c.cost_minor, c.plan != "hourly"))
    break_even = []
    for plan in disc:
        t_days = TERMS[plan].seconds // 86_400
        used_days = 1.0 if t_days == 1 else p.days_per_week * t_days / 7
        h = PERIOD_HOURS[plan] * float(1 - disc[plan] / 100) / used_days
        if h <= 24:
            break_even.append(f"above {h:.1f} h/day a {plan} is cheaper than hourly")
        else:
            break_even.append(f"a {plan} never beats hourly at {p.days_per_week:g} days/week")
    return PlanRecommendation(costs[0].plan, currency, tuple(costs), tuple(break_even))
