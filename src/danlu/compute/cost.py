"""``danlu cost ID``: what one instance has cost, line by line, from the same rows as invoices.

One line per allocation (its plan) and, where the rater splits it at tariff boundaries
(danlu.billing.rating.segments), per tariff part; each with seconds, rate, list price (gross), the
discount, what vouchers and cash paid, and the amount. Posted lines are the sums of the allocation's
``usage_records``; a running allocation adds a line "not yet posted" for the live seconds the meter
has not posted yet (danlu.billing.metering.unbilled_minor), whose vouchers and cash are pending.
The amounts add up to the instance's cost as ``danlu show`` reports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from sqlalchemy import func, select

from danlu.accounts.payers import currency
from danlu.billing.metering import allocation_rate, unbilled_minor
from danlu.billing.rating import billable_seconds, charge_between, round_half_up, segments
from danlu.compute.views import get_owned
from danlu.context import Platform
from danlu.core.money import format_minor
from danlu.db.models import AllocationRow, UsageRecordRow, User


@dataclass(frozen=True)
class CostLine:
    allocation_id: int
    plan: str
    tariff: str | None  # the tariff part, None where no tariff applies
    seconds: int
    gpus: int
    price_per_hour_minor: int  # per GPU-hour, before any tariff multiplier and discount
    gross_minor: int
    discount_minor: int
    voucher_minor: int | None  # None: not posted yet, so not yet split between vouchers and cash
    cash_minor: int | None
    amount_minor: int
    posted: bool
    multiplier: Decimal = Decimal(1)  # the tariff's: the price applied is price_per_hour x multiplier

    def as_dict(self, cur: str) -> dict[str, object]:
        def money(v: int | None) -> str:
            return "pending" if v is None else format_minor(v, cur)

        return {
            "allocation_id": self.allocation_id,
            "description": "posted" if self.posted else "not yet posted",
            "plan": self.plan,
            "tariff": self.tariff,
            "seconds": self.seconds,
            "gpus": self.gpus,
            "price_per_hour": format_minor(self.price_per_hour_minor, cur),
            "multiplier": str(self.multiplier),
            "gross": format_minor(self.gross_minor, cur),
            "discount": format_minor(self.discount_minor, cur),
            "vouchers": money(self.voucher_minor),
            "cash": money(self.cash_minor),
            "amount": format_minor(self.amount_minor, cur),
            "posted": self.posted,
        }


@dataclass(frozen=True)
class CostView:
    instance_id: str
    currency: str
    lines: list[CostLine]

    @property
    def cost_minor(self) -> int:
        return sum(line.amount_minor for line in self.lines)

    def as_dict(self) -> dict[str, object]:
        return {
            "instance_id": self.instance_id,
            "currency": self.currency,
            "cost": format_minor(self.cost_minor, self.currency),
            "lines": [line.as_dict(self.currency) for line in self.lines],
        }


def spread(total: int, weights: list[Fraction]) -> list[int]:
    """``total`` split in proportion to ``weights`` by rounding the cumulative share (half up), so
    the parts always add up to ``total`` (everything on the first part when the weights are 0)."""
    whole = sum(weights, Fraction(0))
    if whole == 0:
        return [total] + [0] * (len(weights) - 1)
    out, done, prefix = [], 0, Fraction(0)
    for w in weights:
        prefix += w
        upto = round_half_up(total * prefix / whole)
        out.append(upto - done)
        done = upto
    return out


def _posted(a: AllocationRow, gross: int, voucher: int, amount: int) -> list[CostLine]:
    seconds = billable_seconds(a.started_at_ms, a.billed_until_ms)
    parts = segments(allocation_rate(a), 0, seconds) or []
    if len(parts) <= 1:
        one = (parts[0].tariff, parts[0].multiplier) if parts else (None, Decimal(1))
        split = [(*one, seconds, gross, voucher, amount)]
    else:
        weights = [p.exact for p in parts]
        g = spread(gross, [p.gross_exact for p in parts])
        v, m = spread(voucher, weights), spread(amount, weights)
        split = [(p.tariff, p.multiplier, p.seconds, g[i], v[i], m[i]) for i, p in enumerate(parts)]
    return [
        CostLine(a.id, a.plan, t, s, a.gpu_count, a.price_per_hour_minor, g_, g_ - m_, v_, m_ - v_, m_, True, x)
        for t, x, s, g_, v_, m_ in split
    ]


def _live(a: AllocationRow, now_ms: int) -> CostLine | None:
    if a.settled:
        return None
    end = max(a.billed_until_ms, min(a.ended_at_ms if a.ended_at_ms is not None else now_ms, now_ms))
    seconds = billable_seconds(a.started_at_ms, end) - billable_seconds(a.started_at_ms, a.billed_until_ms)
    if seconds <= 0:
        return None
    amount = unbilled_minor(a, now_ms)
    gross = charge_between(allocation_rate(a, discounted=False), a.billed_until_ms, end)
    return CostLine(
        a.id,
        a.plan,
        None,
        seconds,
        a.gpu_count,
        a.price_per_hour_minor,
        gross,
        gross - amount,
        None,
        None,
        amount,
        False,
    )


def explain_cost(p: Platform, user: User, instance_id: str) -> CostView:
    """The instance's cost line by line (see the module docstring); 404 for an instance the caller
    may not see (another renter's, another team's), as everywhere."""
    now = p.clock.now_ms()
    with p.db.read() as s:
        inst = get_owned(s, user, instance_id, removed_too=True)  # what a removed one cost, too
        allocs = list(
            s.scalars(select(AllocationRow).where(AllocationRow.instance_id == inst.id).order_by(AllocationRow.id))
        )
        sums = {
            row[0]: (int(row[1]), int(row[2]), int(row[3]))
            for row in s.execute(
                select(
                    UsageRecordRow.allocation_id,
                    func.coalesce(func.sum(UsageRecordRow.gross_minor), 0),
                    func.coalesce(func.sum(UsageRecordRow.voucher_minor), 0),
                    func.coalesce(func.sum(UsageRecordRow.amount_minor), 0),
                )
                .where(UsageRecordRow.allocation_id.in_([a.id for a in allocs]))
                .group_by(UsageRecordRow.allocation_id)
            )
        }
        lines: list[CostLine] = []
        for a in allocs:
            gross, voucher, amount = sums.get(a.id, (0, 0, 0))
            if a.billed_until_ms > a.started_at_ms or amount:
                lines.extend(_posted(a, gross, voucher, amount))
            live = _live(a, now)
            if live is not None:
                lines.append(live)
        return CostView(inst.id, currency(s), lines)
